#include "decode_node/kv_receivers.h"

namespace baton {

absl::Status add_kv_receivers(const std::vector<std::string>& kinds, DecodeService& service) {
  (void)kinds;
  (void)service;
  return absl::UnimplementedError("KV transports are not wired yet");
}

}  // namespace baton
