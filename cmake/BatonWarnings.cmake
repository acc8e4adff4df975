# Warnings for our own targets (not for third-party headers, which come in as system includes).
function(baton_target_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow=local -Wnon-virtual-dtor
                              -Wno-missing-field-initializers
                              # GCC 12 false positive on std::string at -O3 (GCC bug 105329).
                              -Wno-restrict>)
endfunction()

# Kernel code must round exactly as written: no contraction of a*b+c into an FMA behind our back
# (it would make results depend on the ISA the file was compiled for) and no fast-math.
function(baton_exact_fp target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off -fno-fast-math>)
endfunction()
