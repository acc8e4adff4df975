#include "security/public_api_channel.h"

#include "common/status.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/support/client_interceptor.h"
#include "security/grpc_credentials.h"

namespace baton::security {
namespace {

namespace gx = grpc::experimental;

class BearerInterceptor final : public gx::Interceptor {
 public:
  explicit BearerInterceptor(const std::string& value) : value_(value) {}
  void Intercept(gx::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(gx::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", value_});
    }
    methods->Proceed();
  }

 private:
  const std::string value_;
};

class BearerInterceptorFactory final : public gx::ClientInterceptorFactoryInterface {
 public:
  explicit BearerInterceptorFactory(const std::string& key) : value_(str_cat("Bearer ", key)) {}
  gx::Interceptor* CreateClientInterceptor(gx::ClientRpcInfo*) override { return new BearerInterceptor(value_); }

 private:
  const std::string value_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> public_api_channel(const std::string& endpoint,
                                                                  const std::string& ca_file,
                                                                  const std::string& api_key,
                                                                  const grpc::ChannelArguments& args) {
  BATON_ASSIGN_OR_RETURN(auto credentials, client_channel_credentials(ca_file));
  std::vector<std::unique_ptr<gx::ClientInterceptorFactoryInterface>> interceptors;
  if (!api_key.empty()) interceptors.push_back(std::make_unique<BearerInterceptorFactory>(api_key));
  return gx::CreateCustomChannelWithInterceptors(endpoint, credentials, args, std::move(interceptors));
}

}  // namespace baton::security
