// Stream::Impl: one running Generate call (its context and reader). Private to libbaton_client.
#pragma once

#include <memory>

#include "baton/client.h"
#include "baton/v1/api.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace baton {

struct Stream::Impl {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader;
  Status status;
  bool done = false;
};

}  // namespace baton
