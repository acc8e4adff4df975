// Graphs on the CPU backend: while a thread captures (Backend::begin_capture), each op the
// CpuBackend is called with from that thread is stored as a closure over its arguments instead of
// running; a replay runs the closures in order. A CPU gains no speed from this. It exists so that
// the engine's graph path (padded batches, bounds instead of exact launch values, uploads kept
// outside the graph, nothing allocated or synchronised inside it) runs and is tested here exactly
// as it is captured on a GPU, where a CUDA graph freezes launch arguments the same way.
//
// Capture is per thread, like CUDA's thread-local capture mode: other threads' calls (a transport
// allocating memory) run as usual and do not break it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace baton::cpu {

struct CpuCapture {
  const Backend* backend = nullptr;
  std::vector<std::function<void()>> ops;
  std::string broken_by;  // the first call a graph cannot hold, if any
};

// The capture this thread is running, or null.
inline thread_local CpuCapture* t_cpu_capture = nullptr;

class CpuOpGraph final : public OpGraph {
 public:
  explicit CpuOpGraph(std::vector<std::function<void()>> ops) : ops_(std::move(ops)) {}
  void replay() override;
  std::size_t num_ops() const { return ops_.size(); }

 private:
  std::vector<std::function<void()>> ops_;
};

}  // namespace baton::cpu
