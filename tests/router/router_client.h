// A client of an in-process router for tests: stubs on one channel and Generate collected whole.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "baton/v1/api.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace baton::router::testing {

struct GenerateResult {
  std::vector<baton::v1::GenerateResponse> messages;
  grpc::Status status;

  std::vector<std::int32_t> token_ids() const {
    std::vector<std::int32_t> ids;
    for (const auto& m : messages) ids.insert(ids.end(), m.token_ids().begin(), m.token_ids().end());
    return ids;
  }
  std::string text() const {
    std::string s;
    for (const auto& m : messages) s += m.text();
    return s;
  }
  const baton::v1::GenerateResponse& last() const { return messages.back(); }
};

class RouterClient {
 public:
  explicit RouterClient(int port)
      : channel_(grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials())),
        stub_(baton::v1::Baton::NewStub(channel_)) {}

  GenerateResult generate(const baton::v1::GenerateRequest& request, grpc::ClientContext* context = nullptr) {
    grpc::ClientContext own;
    if (context == nullptr) context = &own;
    GenerateResult result;
    auto reader = stub_->Generate(context, request);
    baton::v1::GenerateResponse m;
    while (reader->Read(&m)) result.messages.push_back(m);
    result.status = reader->Finish();
    return result;
  }

  baton::v1::Baton::Stub& stub() { return *stub_; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<baton::v1::Baton::Stub> stub_;
};

inline baton::v1::GenerateRequest token_request(std::vector<std::int32_t> ids, int max_tokens = 8) {
  baton::v1::GenerateRequest r;
  r.mutable_token_ids()->mutable_ids()->Assign(ids.begin(), ids.end());
  r.mutable_sampling()->set_max_tokens(max_tokens);
  return r;
}

}  // namespace baton::router::testing
