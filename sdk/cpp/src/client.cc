// baton::Client: one channel and stub; each call sets its deadline and converts the messages.
#include "baton/client.h"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "baton/v1/api.grpc.pb.h"
#include "convert.h"
#include "grpcpp/grpcpp.h"
#include "stream_impl.h"

namespace baton {

using client_internal::from_grpc;
using client_internal::from_proto;
using client_internal::to_proto;
using Clock = std::chrono::steady_clock;

struct Client::Impl {
  ClientOptions options;
  std::string authorization;  // "Bearer KEY", or "" without a key
  std::unique_ptr<v1::Baton::Stub> stub;

  // Every call's deadline and key.
  void prepare(grpc::ClientContext& context, const CallOptions& call) const {
    context.set_deadline(std::chrono::system_clock::now() + call.timeout.value_or(options.default_timeout));
    if (!authorization.empty()) context.AddMetadata("authorization", authorization);
  }
};

namespace {

std::shared_ptr<grpc::ChannelCredentials> credentials(const ClientOptions& options) {
  if (!options.tls) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = options.tls->root_certs_pem;
  ssl.pem_private_key = options.tls->private_key_pem;
  ssl.pem_cert_chain = options.tls->cert_chain_pem;
  return grpc::SslCredentials(ssl);
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

Client::Client(const std::string& target, ClientOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->stub = v1::Baton::NewStub(grpc::CreateChannel(target, credentials(options)));
  std::string key = options.api_key.value_or("");
  if (!options.api_key) {
    if (const char* env = std::getenv("BATON_API_KEY")) key = env;
  }
  if (!key.empty()) impl_->authorization = "Bearer " + key;
  impl_->options = std::move(options);
}

Result<TlsOptions> TlsOptions::from_ca_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream pem;
  pem << in.rdbuf();
  if (!in || pem.str().empty()) {
    return Status(StatusCode::kInvalidArgument, "cannot read the CA certificate file " + path);
  }
  TlsOptions tls;
  tls.root_certs_pem = pem.str();
  return tls;
}

Client::~Client() = default;
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;

Stream Client::open_stream(const GenerateRequest& request, const CallOptions& call) const {
  auto s = std::make_unique<Stream::Impl>();
  impl_->prepare(s->context, call);
  s->reader = impl_->stub->Generate(&s->context, to_proto(request));
  return Stream(std::move(s));
}

Result<GenerateResult> Client::stream(const GenerateRequest& request, const std::function<void(const Delta&)>& on_delta,
                                      const CallOptions& call) const {
  const auto start = Clock::now();
  GenerateResult result;
  Stream s = open_stream(request, call);
  while (std::optional<Delta> d = s.next()) {
    if (result.client_time_to_first_token_ms == 0 && !d->token_ids.empty()) {
      result.client_time_to_first_token_ms = ms_since(start);
    }
    result.append(*d);
    if (on_delta) on_delta(*d);
  }
  if (!s.status().ok()) return s.status();
  result.client_total_ms = ms_since(start);
  return result;
}

Result<GenerateResult> Client::generate(const GenerateRequest& request, const CallOptions& call) const {
  return stream(request, nullptr, call);
}

Result<bool> Client::abort(const std::string& request_id, const CallOptions& call) const {
  grpc::ClientContext context;
  impl_->prepare(context, call);
  v1::AbortRequest request;
  request.set_request_id(request_id);
  v1::AbortResponse response;
  const grpc::Status s = impl_->stub->Abort(&context, request, &response);
  if (!s.ok()) return from_grpc(s);
  return response.found();
}

Result<ModelInfo> Client::model_info(const CallOptions& call) const {
  grpc::ClientContext context;
  impl_->prepare(context, call);
  v1::ModelInfo info;
  const grpc::Status s = impl_->stub->GetModelInfo(&context, v1::GetModelInfoRequest(), &info);
  if (!s.ok()) return from_grpc(s);
  return from_proto(info);
}

Result<TokenizeResult> Client::tokenize(const TokenizeRequest& request, const CallOptions& call) const {
  grpc::ClientContext context;
  impl_->prepare(context, call);
  v1::TokenizeResponse response;
  const grpc::Status s = impl_->stub->Tokenize(&context, to_proto(request), &response);
  if (!s.ok()) return from_grpc(s);
  return TokenizeResult{{response.ids().begin(), response.ids().end()}, response.prompt()};
}

}  // namespace baton
