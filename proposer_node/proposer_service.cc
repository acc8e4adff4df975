#include "proposer_node/proposer_service.h"

#include <memory>

#include "proto/status_convert.h"
#include "proposer_node/proposer_session.h"

namespace baton {

class ProposeReactor final : public grpc::ServerBidiReactor<node::v1::ProposerRequest, node::v1::ProposerReply> {
 public:
  explicit ProposeReactor(ProposerService& service) : service_(service) {
    ++service_.open_streams_;
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the node closed its side (or the stream broke)
      Finish(grpc::Status::OK);
      return;
    }
    if (!session_) {
      auto s = ProposerSession::open(service_.pool_, request_.hello(), service_.options_.max_context_tokens_per_node);
      if (!s.ok()) {
        Finish(to_grpc_status(s.status()));
        return;
      }
      session_ = std::move(*s);
      reply_.Clear();
      *reply_.mutable_hello() = session_->ack();
      StartWrite(&reply_);
      return;
    }
    std::optional<node::v1::ProposerReply> reply = session_->handle(request_);
    if (!reply) {
      StartRead(&request_);
      return;
    }
    reply_ = std::move(*reply);
    StartWrite(&reply_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "writing to the node failed"));
      return;
    }
    StartRead(&request_);
  }

  void OnDone() override {
    session_.reset();  // drops the node's contexts
    --service_.open_streams_;
    delete this;
  }

 private:
  ProposerService& service_;
  std::unique_ptr<ProposerSession> session_;
  node::v1::ProposerRequest request_;
  node::v1::ProposerReply reply_;
};

grpc::ServerBidiReactor<node::v1::ProposerRequest, node::v1::ProposerReply>* ProposerService::Propose(
    grpc::CallbackServerContext* /*ctx*/) {
  return new ProposeReactor(*this);
}

}  // namespace baton
