#include "kernels/cpu/cpu_graph.h"

#include "common/status.h"
#include "kernels/cpu/cpu_backend.h"

namespace baton::cpu {

void CpuOpGraph::replay() {
  BATON_CHECK(t_cpu_capture == nullptr, "a graph replayed while this thread captures another");
  for (const auto& op : ops_) op();
}

absl::Status CpuBackend::begin_capture() {
  if (t_cpu_capture != nullptr) {
    return absl::FailedPreconditionError("begin_capture(): this thread is already capturing a graph");
  }
  t_cpu_capture = new CpuCapture;
  t_cpu_capture->backend = this;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<OpGraph>> CpuBackend::end_capture() {
  if (t_cpu_capture == nullptr || t_cpu_capture->backend != this) {
    return absl::FailedPreconditionError("end_capture() without begin_capture() on this thread");
  }
  std::unique_ptr<CpuCapture> capture(t_cpu_capture);
  t_cpu_capture = nullptr;
  if (!capture->broken_by.empty()) {
    return absl::FailedPreconditionError(str_cat("graph capture broken by ", capture->broken_by,
                                                 " (only ops can be recorded in a graph)"));
  }
  return std::unique_ptr<OpGraph>(new CpuOpGraph(std::move(capture->ops)));
}

bool CpuBackend::breaks_capture(const char* call) const {
  CpuCapture* c = t_cpu_capture;
  if (c == nullptr || c->backend != this) return false;
  if (c->broken_by.empty()) c->broken_by = str_cat(call, "()");
  return true;
}

}  // namespace baton::cpu
