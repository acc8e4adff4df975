// The router's public gRPC service, baton.v1.Baton: Generate on gRPC's callback API (a
// GenerateCall per stream, no thread per stream) and the short calls (Abort, GetModelInfo,
// Tokenize). Every call is authenticated first (--api-keys-file).
//
// Must not: pick nodes or talk to them (the request flow does, through RouterService::run), or
// block a gRPC thread on a request.
#include <memory>
#include <mutex>

#include "baton/v1/api.grpc.pb.h"
#include "grpcpp/support/server_callback.h"
#include "proto/status_convert.h"
#include "router/prompt.h"
#include "router/router_service.h"

namespace baton::router {
namespace {

using baton::v1::GenerateRequest;
using baton::v1::GenerateResponse;

absl::StatusOr<security::KeyId> caller_of(const RouterService& router, const grpc::ServerContextBase& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  const std::string_view value =
      it == metadata.end() ? std::string_view() : std::string_view(it->second.data(), it->second.size());
  return router.authenticate(value);
}

}  // namespace


// One Generate call on gRPC's callback API: authenticated, admitted (perhaps after a wait in the
// queue, which the client's cancel leaves), then run by the request flow, whose messages it writes
// one at a time. Deletes itself when gRPC is done with the call.
class RouterService::GenerateCall final : public grpc::ServerWriteReactor<GenerateResponse>, public ResponseSink {
 public:
  GenerateCall(RouterService& router, grpc::CallbackServerContext* context, const GenerateRequest* request)
      : router_(router), context_(context), request_(request) {}

  void start() {
    auto caller = caller_of(router_, *context_);
    if (!caller.ok()) return Finish(to_grpc_status(caller.status()));
    const std::uint64_t ticket = router_.admit_async(
        *request_, Clock::now(), *caller,
        [this](absl::StatusOr<std::unique_ptr<AdmittedRequest>> admitted) { on_admitted(std::move(admitted)); });
    std::lock_guard lock(mu_);
    if (!admission_over_) ticket_ = ticket;
  }

  void write(const GenerateResponse& response, std::function<void(bool)> sent) override {
    out_ = response;
    sent_ = std::move(sent);
    StartWrite(&out_);
  }

  void OnWriteDone(bool ok) override {
    auto sent = std::move(sent_);
    sent(ok);
  }

  // The client went away (or its deadline passed): a queued request leaves the queue, a running one
  // has its node calls cancelled and ends CANCELLED.
  void OnCancel() override {
    std::uint64_t ticket = 0;
    RequestControl* control = nullptr;
    {
      std::lock_guard lock(mu_);
      client_gone_ = true;
      std::swap(ticket, ticket_);
      if (admitted_) control = &admitted_->control();
    }
    if (ticket != 0) router_.leave_queue(ticket);
    if (control != nullptr) control->client_left("the client cancelled the request");
  }

  void OnDone() override { delete this; }

 private:
  void on_admitted(absl::StatusOr<std::unique_ptr<AdmittedRequest>> admitted) {
    bool gone = false;
    {
      std::lock_guard lock(mu_);
      admission_over_ = true;
      ticket_ = 0;
      if (admitted.ok()) admitted_ = std::move(*admitted);
      gone = client_gone_;
    }
    if (!admitted.ok()) return Finish(to_grpc_status(admitted.status()));
    if (gone) return Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the request"));
    router_.run(*admitted_, *request_, context_, *this, [this](grpc::Status s) { Finish(s); });
  }

  RouterService& router_;
  grpc::CallbackServerContext* const context_;
  const GenerateRequest* const request_;
  std::mutex mu_;
  bool admission_over_ = false;
  bool client_gone_ = false;  // OnCancel came
  std::uint64_t ticket_ = 0;  // while it waits in the admission queue
  std::unique_ptr<AdmittedRequest> admitted_;  // set under mu_, then only read
  GenerateResponse out_;  // the message being written
  std::function<void(bool)> sent_;
};

// Generate on the callback API (no thread per stream); the short calls stay synchronous.
class RouterService::BatonImpl final : public baton::v1::Baton::WithCallbackMethod_Generate<baton::v1::Baton::Service> {
 public:
  BatonImpl(RouterService& router, const PromptEncoder& encoder) : router_(router), encoder_(encoder) {}

  grpc::ServerWriteReactor<GenerateResponse>* Generate(grpc::CallbackServerContext* context,
                                                      const GenerateRequest* request) override {
    auto* call = new GenerateCall(router_, context, request);
    call->start();
    return call;
  }

  grpc::Status Abort(grpc::ServerContext* context, const baton::v1::AbortRequest* request,
                     baton::v1::AbortResponse* response) override {
    auto caller = caller_of(router_, *context);
    if (!caller.ok()) return to_grpc_status(caller.status());
    if (request->request_id().empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "request_id is empty");
    // Only the caller that started a request can stop it (another caller's id is "not found").
    response->set_found(router_.running_.cancel(*caller, request->request_id(), "aborted by the Abort RPC"));
    return grpc::Status::OK;
  }

  grpc::Status GetModelInfo(grpc::ServerContext* context, const baton::v1::GetModelInfoRequest*,
                            baton::v1::ModelInfo* info) override {
    auto caller = caller_of(router_, *context);
    if (!caller.ok()) return to_grpc_status(caller.status());
    *info = router_.model_info();
    return grpc::Status::OK;
  }

  grpc::Status Tokenize(grpc::ServerContext* context, const baton::v1::TokenizeRequest* request,
                        baton::v1::TokenizeResponse* response) override {
    auto caller = caller_of(router_, *context);
    if (!caller.ok()) return to_grpc_status(caller.status());
    absl::StatusOr<EncodedPrompt> prompt = encoder_.encode(*request);
    if (!prompt.ok()) return to_grpc_status(prompt.status());
    response->mutable_ids()->Assign(prompt->ids.begin(), prompt->ids.end());
    response->set_prompt(prompt->rendered);
    return grpc::Status::OK;
  }

 private:
  RouterService& router_;
  const PromptEncoder& encoder_;
};

std::unique_ptr<grpc::Service> RouterService::make_public_service() {
  return std::make_unique<BatonImpl>(*this, *encoder_);
}

}  // namespace baton::router
