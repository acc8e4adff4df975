// --kv-transfer-config: vLLM's flag, of which Baton reads only what extract_hidden_states needs —
// where its files go. Baton moves KV between its own nodes by itself (docs/serving.md); this flag
// names no connector for that.
//
//   {"kv_connector": "ExampleHiddenStatesConnector",      (or OnlineHiddenStatesConnector)
//    "kv_role": "kv_producer",
//    "kv_connector_extra_config": {"shared_storage_path": "/data/hidden_states"}}
//
// Unknown keys, other connectors and roles are errors naming the key (a key Baton ignored would
// let a user believe, e.g., that files are compressed or that clients may choose paths).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace baton {

// The directory of shared_storage_path, as given.
absl::StatusOr<std::string> parse_kv_transfer_config(std::string_view json_text);

}  // namespace baton
