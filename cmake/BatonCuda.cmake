# Resolves BATON_CUDA (AUTO|ON|OFF) into BATON_HAVE_CUDA and enables the CUDA language when used.
# AUTO builds the CUDA parts whenever nvcc is found (PATH, $CUDACXX or /usr/local/cuda); ON fails
# the configure step when it is not.
string(TOUPPER "${BATON_CUDA}" _baton_cuda)
set(BATON_HAVE_CUDA OFF)
if(NOT _baton_cuda STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Ampere (A100) and Hopper (H100/H200): the GPUs production runs on.
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)  # CMake 3.25 does not know C++20 for nvcc
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    # One CUDA runtime per process: the shared libcudart that CUDA::cudart (and cuBLAS) link, not
    # CMake's default static copy in targets with .cu files next to it.
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    find_package(CUDAToolkit REQUIRED)
    set(BATON_HAVE_CUDA ON)
  elseif(_baton_cuda STREQUAL "ON")
    message(FATAL_ERROR "BATON_CUDA=ON but no CUDA compiler was found (set CUDACXX or install the toolkit)")
  endif()
endif()
message(STATUS "Baton CUDA backend: ${BATON_HAVE_CUDA} (BATON_CUDA=${BATON_CUDA})")
