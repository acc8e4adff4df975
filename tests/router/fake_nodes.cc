#include "fake_nodes.h"

#include <chrono>
#include <regex>
#include <thread>

#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace baton::router::testing {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<grpc::Server> serve(grpc::Service* service, std::string* address) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(service);
  auto server = builder.BuildAndStart();
  *address = "127.0.0.1:" + std::to_string(port);
  return server;
}

std::string text_of(const std::vector<std::int32_t>& ids) {
  std::string s;
  for (std::int32_t id : ids) s += "<" + std::to_string(id) + ">";
  return s;
}

}  // namespace

void CallLog::add(const std::string& what) {
  static const std::regex kSuffix("~[0-9a-f]{16}");
  std::lock_guard lock(mu_);
  raw_calls_.push_back(what);
  calls_.push_back(std::regex_replace(what, kSuffix, ""));
  cv_.notify_all();
}

std::vector<std::string> CallLog::calls() const {
  std::lock_guard lock(mu_);
  return calls_;
}

std::vector<std::string> CallLog::raw_calls() const {
  std::lock_guard lock(mu_);
  return raw_calls_;
}

int CallLog::count(const std::string& what) const {
  std::lock_guard lock(mu_);
  int n = 0;
  for (const auto& c : calls_) n += c == what ? 1 : 0;
  return n;
}

bool CallLog::wait_for_count(const std::string& prefix, int n, int ms) const {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] {
    int found = 0;
    for (const auto& c : calls_) found += c.rfind(prefix, 0) == 0;
    return found >= n;
  });
}

bool CallLog::wait_for(const std::string& what, int ms) const {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] {
    for (const auto& c : calls_) {
      if (c == what) return true;
    }
    return false;
  });
}

// ---- decode ------------------------------------------------------------------------------------

FakeDecodeNode::FakeDecodeNode(baton::node::v1::NodeInfo info) : info_(std::move(info)) {
  server_ = serve(this, &address_);
  info_.set_address(address_);
}

FakeDecodeNode::~FakeDecodeNode() { server_->Shutdown(std::chrono::system_clock::now() + 1s); }

void FakeDecodeNode::commit(const std::string& id, std::int32_t first_token) {
  std::lock_guard lock(mu_);
  committed_[id] = first_token;
  cv_.notify_all();
}

grpc::Status FakeDecodeNode::Reserve(grpc::ServerContext*, const baton::node::v1::ReserveRequest* r,
                                     baton::node::v1::KvDestination* d) {
  log.add("Reserve " + r->request_id());
  if (!reserve_status.ok()) return reserve_status;
  d->set_request_id(r->request_id());
  d->set_decode_address(address_);
  d->set_decode_instance_id(info_.instance_id());
  d->set_transport("grpc");
  d->set_layout_fingerprint(info_.layout_fingerprint());
  for (int b = 0; b < (r->prompt_len() + 15) / 16; ++b) d->add_kv_blocks(b);
  d->set_lease_ms(30000);
  return grpc::Status::OK;
}

grpc::Status FakeDecodeNode::Decode(grpc::ServerContext* context, const baton::node::v1::DecodeRequest* r,
                                    grpc::ServerWriter<baton::node::v1::DecodeResponse>* writer) {
  const std::string& id = r->request_id();
  const bool local = r->has_local();
  log.add(std::string(local ? "Decode local " : "Decode ") + id);
  std::int32_t first = -1;
  if (!local) {
    // Wait for P's commit, as a decode node does, until the commit timeout or a cancel.
    std::unique_lock lock(mu_);
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(r->commit_timeout_ms());
    while (!committed_.contains(id)) {
      if (context->IsCancelled()) {
        log.add("Cancelled " + id);
        return grpc::Status::CANCELLED;
      }
      if (std::chrono::steady_clock::now() >= until) {
        return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "no commit for " + id);
      }
      cv_.wait_for(lock, 5ms);
    }
    first = committed_[id];
  }
  std::vector<std::vector<std::int32_t>> out = messages;
  if (local) out.insert(out.begin(), std::vector<std::int32_t>{10});  // the first token is D's own
  std::int32_t produced = local ? 0 : 1;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (fail_after_messages >= 0 && static_cast<int>(i) == fail_after_messages) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "decode node lost its device");
    }
    baton::node::v1::DecodeResponse m;
    m.mutable_token_ids()->Assign(out[i].begin(), out[i].end());
    m.set_text(text_of(out[i]));
    produced += static_cast<std::int32_t>(out[i].size());
    if (i + 1 == out.size() && !hold_after_messages) {
      m.set_finish_reason(finish);
      if (finish == baton::v1::FINISH_REASON_STOP) m.set_stop_token(out[i].back());
      m.set_num_prompt_tokens(local ? r->local().prompt_size() : 0);
      m.set_num_cached_prompt_tokens(local ? 2 : 0);
      m.set_num_output_tokens(produced);
      m.mutable_speculation()->set_num_drafts(2);
      m.mutable_speculation()->set_num_draft_tokens(8);
      m.mutable_speculation()->set_num_accepted_tokens(3);
      m.set_prefill_ms(local ? 4.0 : 0.0);
    }
    if (!writer->Write(m)) break;
  }
  (void)first;
  if (hold_after_messages) {
    while (!context->IsCancelled()) std::this_thread::sleep_for(5ms);
    log.add("Cancelled " + id);
    return grpc::Status::CANCELLED;
  }
  return grpc::Status::OK;
}

grpc::Status FakeDecodeNode::Release(grpc::ServerContext*, const baton::node::v1::ReleaseRequest* r,
                                     baton::node::v1::ReleaseResponse* response) {
  log.add("Release " + r->request_id());
  response->set_found(true);
  return grpc::Status::OK;
}

grpc::Status FakeDecodeNode::Abort(grpc::ServerContext*, const baton::node::v1::NodeAbortRequest* r,
                                   baton::node::v1::NodeAbortResponse* response) {
  log.add("Abort " + r->request_id());
  response->set_found(true);
  return grpc::Status::OK;
}

grpc::Status FakeDecodeNode::Info(grpc::ServerContext*, const baton::node::v1::InfoRequest*,
                                  baton::node::v1::NodeInfo* info) {
  *info = info_;
  return grpc::Status::OK;
}

// ---- prefill -----------------------------------------------------------------------------------

FakePrefillNode::FakePrefillNode(baton::node::v1::NodeInfo info, std::map<std::string, FakeDecodeNode*> decodes)
    : info_(std::move(info)), decodes_(std::move(decodes)) {
  server_ = serve(this, &address_);
  info_.set_address(address_);
}

FakePrefillNode::~FakePrefillNode() { server_->Shutdown(std::chrono::system_clock::now() + 1s); }

grpc::Status FakePrefillNode::Prefill(grpc::ServerContext* context, const baton::node::v1::PrefillRequest* r,
                                      baton::node::v1::PrefillResponse* response) {
  log.add("Prefill " + r->request_id() + " " + std::to_string(r->prompt_size()));
  if (!status.ok()) return status;
  if (hold) {
    while (!context->IsCancelled()) std::this_thread::sleep_for(5ms);
    log.add("Cancelled " + r->request_id());
    return grpc::Status::CANCELLED;
  }
  if (r->destination().layout_fingerprint() != info_.layout_fingerprint()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "layout fingerprints differ");
  }
  response->set_first_token(first_token);
  response->set_text(text_of({first_token}));
  response->set_num_cached_prompt_tokens(3);
  response->set_prefill_ms(1.5);
  response->set_kv_transfer_ms(0.5);
  if (r->sampling().has_logprobs()) {
    response->mutable_logprob()->set_token(first_token);
    response->mutable_logprob()->set_logprob(-0.25f);
  }
  if (finish_at_first_token) {
    response->set_finished(true);
    response->set_finish_reason(baton::v1::FINISH_REASON_STOP);
    response->set_stop_token(first_token);
    return grpc::Status::OK;
  }
  auto d = decodes_.find(r->destination().decode_address());
  if (d == decodes_.end()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "unknown decode node");
  d->second->commit(r->destination().request_id(), first_token);
  return grpc::Status::OK;
}

grpc::Status FakePrefillNode::Abort(grpc::ServerContext*, const baton::node::v1::NodeAbortRequest* r,
                                    baton::node::v1::NodeAbortResponse* response) {
  log.add("Abort " + r->request_id());
  response->set_found(false);
  return grpc::Status::OK;
}

grpc::Status FakePrefillNode::Info(grpc::ServerContext*, const baton::node::v1::InfoRequest*,
                                   baton::node::v1::NodeInfo* info) {
  *info = info_;
  return grpc::Status::OK;
}

}  // namespace baton::router::testing
