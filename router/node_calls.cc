#include "router/node_calls.h"

#include <algorithm>
#include <type_traits>

#include "baton/v1/node.grpc.pb.h"
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
  auto c = std::make_unique<grpc::ClientContext>();
  // gRPC deadlines take system_clock time points.
  auto deadline = std::chrono::system_clock::now() + std::min<Clock::duration>(timeout, request_deadline_ - Clock::now());
  if (server_ != nullptr) deadline = std::min(deadline, server_->deadline());
  c->set_deadline(deadline);
  return c;
}

std::unique_ptr<grpc::ClientContext> NodeCalls::context_until_request_deadline() const {
  return context(std::chrono::duration_cast<std::chrono::milliseconds>(request_deadline_ - Clock::now()) +
                 std::chrono::milliseconds(1));
}

grpc::Status NodeCalls::failed(const Node& node, const grpc::Status& status) {
  if (!stopped()) pool_.report_failure(node, status);
  return grpc::Status(status.error_code(), str_cat(node.label(), ": ", status.error_message()));
}

namespace {

// One best-effort unary call and what it must keep alive until its callback.
template <class Request, class Response>
struct FireAndForget {
  grpc::ClientContext context;
  Request request;
  Response response;
  std::shared_ptr<Node> node;
  std::function<void()> ended;
};

}  // namespace

void NodeCalls::release(std::shared_ptr<Node> decode, const std::string& id, const std::string& capability,
                        std::function<void()> ended) {
  auto* call = new FireAndForget<baton::node::v1::ReleaseRequest, baton::node::v1::ReleaseResponse>{};
  call->context.set_deadline(std::chrono::system_clock::now() + abort_timeout_);
  call->request.set_request_id(id);
  call->request.set_capability(capability);
  call->node = std::move(decode);
  call->ended = std::move(ended);
  stats_.node_releases_sent.fetch_add(1, std::memory_order_relaxed);
  call->node->decode().async()->Release(&call->context, &call->request, &call->response, [call](grpc::Status s) {
    std::unique_ptr<std::remove_pointer_t<decltype(call)>> owned(call);
    if (!s.ok()) {
      spdlog::warn("router: Release({}) on {} failed ({}: {}); its lease will reclaim the blocks",
                   owned->request.request_id(), owned->node->label(), grpc_code_name(s.error_code()), s.error_message());
    }
    auto then = std::move(owned->ended);
    owned.reset();
    then();
  });
}

bool NodeCalls::abort(std::shared_ptr<Node> node, const std::string& id, const std::string& capability,
                      std::function<void()> ended) {
  if (!aborted_.insert(str_cat(node->address(), "|", id)).second) return false;
  auto* call = new FireAndForget<baton::node::v1::NodeAbortRequest, baton::node::v1::NodeAbortResponse>{};
  call->context.set_deadline(std::chrono::system_clock::now() + abort_timeout_);
  call->request.set_request_id(id);
  call->request.set_capability(capability);
  call->node = std::move(node);
  call->ended = std::move(ended);
  stats_.node_aborts_sent.fetch_add(1, std::memory_order_relaxed);
  auto on_end = [call](grpc::Status s) {
    std::unique_ptr<std::remove_pointer_t<decltype(call)>> owned(call);
    const Node& n = *owned->node;
    if (!s.ok()) {
      spdlog::warn("router: Abort({}) on {} failed ({}: {})", owned->request.request_id(), n.label(),
                   grpc_code_name(s.error_code()), s.error_message());
    } else {
      // Logged so that an operator (and the tests) can see what a cancelled request stopped.
      spdlog::info("router: aborted {} on {} ({})", owned->request.request_id(), n.label(),
                   owned->response.found() ? "it was running there" : "it had ended there");
    }
    auto then = std::move(owned->ended);
    owned.reset();
    then();
  };
  if (call->node->kind() == NodeKind::kPrefill) {
    call->node->prefill().async()->Abort(&call->context, &call->request, &call->response, std::move(on_end));
  } else {
    call->node->decode().async()->Abort(&call->context, &call->request, &call->response, std::move(on_end));
  }
  return true;
}

}  // namespace baton::router
