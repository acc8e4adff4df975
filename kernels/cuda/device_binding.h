// DeviceBinding: makes the calling thread's current CUDA device the backend's before it touches
// the CUDA runtime.
//
// The runtime's current device is per host thread. A backend for `--device cuda:1` is created on
// one thread, but the engine loop steps on another, transports free buffers and copy KV on theirs,
// and every one of them starts on device 0: without this, their kernels and allocations land in
// GPU 0's context. CudaBackend calls bind() at the top of every entry point that reaches the
// runtime. bind() asks the runtime which device the thread has (a cheap host-side read) and sets
// it only when it differs, so a thread that other code (NCCL, UCX, a test) moved elsewhere in
// between is moved back too.
//
// The runtime is reached through two plain functions so that tests can check the binding with a
// fake, per-thread "current device" on a machine without a GPU.
//
// Must not: cache the device per thread on its own (other code may change it), or leave a thread on
// another device after bind() returned success.
#pragma once

#include <atomic>
#include <cstdint>

namespace baton::cuda {

struct DeviceRuntime {
  // Both return 0 on success (cudaSuccess), else the runtime's error code.
  int (*get_device)(int* device) = nullptr;
  int (*set_device)(int device) = nullptr;
};

class DeviceBinding {
 public:
  DeviceBinding(int device, DeviceRuntime runtime) : device_(device), runtime_(runtime) {}

  int device() const { return device_; }

  // Makes `device()` the calling thread's current device. Returns 0 or the runtime's error code.
  int bind() const {
    int current = -1;
    const int err = runtime_.get_device(&current);
    if (err == 0 && current == device_) return 0;
    switches_.fetch_add(1, std::memory_order_relaxed);
    return runtime_.set_device(device_);
  }

  // How many bind() calls had to set the device (for tests and logs).
  std::uint64_t switches() const { return switches_.load(std::memory_order_relaxed); }

 private:
  int device_;
  DeviceRuntime runtime_;
  mutable std::atomic<std::uint64_t> switches_{0};
};

}  // namespace baton::cuda
