// Uses the installed SDK without gRPC, protobuf or abseil headers: a call to a port nothing
// listens on must come back as UNAVAILABLE (the library loads and its channel works).
#include <chrono>
#include <cstdio>

#include "baton/client.h"

int main() {
  baton::ClientOptions options;
  options.default_timeout = std::chrono::seconds(5);
  baton::Client client("127.0.0.1:1", options);
  baton::Result<baton::ModelInfo> info = client.model_info();
  std::printf("%s\n", info.status().to_string().c_str());
  return info.status().code() == baton::StatusCode::kUnavailable ? 0 : 1;
}
