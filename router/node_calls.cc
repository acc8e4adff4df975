#include "router/node_calls.h"

#include "common/status.h"
#include "spdlog/spdlog.h"

namespace baton::router {

NodeCalls::NodeCalls(NodePool& pool, RouterStats& stats, RequestControl& control,
                     const grpc::ServerContextBase* server, Clock::time_point request_deadline,
                     std::chrono::milliseconds abort_timeout)
    : pool_(pool),
      stats_(stats),
      control_(control),
      server_(server),
      request_deadline_(request_deadline),
      abort_timeout_(abort_timeout) {}

std::unique_ptr<grpc::ClientContext> NodeCalls::context(std::chrono::milliseconds timeout) const {
  auto c = server_ != nullptr ? grpc::ClientContext::FromServerContext(*server_)
                              : std::make_unique<grpc::ClientContext>();
  // gRPC deadlines take system_clock time points.
  const auto left = std::min<Clock::duration>(timeout, request_deadline_ - Clock::now());
  c->set_deadline(std::chrono::system_clock::now() + left);
  return c;
}

std::unique_ptr<grpc::ClientContext> NodeCalls::context_until_request_deadline() const {
  auto c = server_ != nullptr ? grpc::ClientContext::FromServerContext(*server_)
                              : std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + (request_deadline_ - Clock::now()));
  return c;
}

grpc::Status NodeCalls::failed(const Node& node, const grpc::Status& status) {
  if (!stopped()) pool_.report_failure(node, status);
  return grpc::Status(status.error_code(), str_cat(node.label(), ": ", status.error_message()));
}

void NodeCalls::release(Node& decode, const std::string& id, const std::string& capability) {
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + abort_timeout_);
  baton::node::v1::ReleaseRequest request;
  request.set_request_id(id);
  request.set_capability(capability);
  baton::node::v1::ReleaseResponse response;
  stats_.node_releases_sent.fetch_add(1, std::memory_order_relaxed);
  grpc::Status s = decode.decode().Release(&c, request, &response);
  if (!s.ok()) {
    spdlog::warn("router: Release({}) on {} failed ({}: {}); its lease will reclaim the blocks", id, decode.label(),
                 grpc_code_name(s.error_code()), s.error_message());
  }
}

void NodeCalls::abort(Node& node, const std::string& id, const std::string& capability) {
  if (!aborted_.insert(str_cat(node.address(), "|", id)).second) return;
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + abort_timeout_);
  baton::node::v1::NodeAbortRequest request;
  request.set_request_id(id);
  request.set_capability(capability);
  baton::node::v1::NodeAbortResponse response;
  stats_.node_aborts_sent.fetch_add(1, std::memory_order_relaxed);
  grpc::Status s = node.kind() == NodeKind::kPrefill ? node.prefill().Abort(&c, request, &response)
                                                     : node.decode().Abort(&c, request, &response);
  if (!s.ok()) {
    spdlog::warn("router: Abort({}) on {} failed ({}: {})", id, node.label(), grpc_code_name(s.error_code()),
                 s.error_message());
    return;
  }
  // Logged so that an operator (and the tests) can see what a cancelled request stopped.
  spdlog::info("router: aborted {} on {} ({})", id, node.label(),
               response.found() ? "it was running there" : "it had ended there");
}

}  // namespace baton::router
