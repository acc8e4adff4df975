#include "engine/spec/kv_transfer_config.h"

#include "common/status.h"
#include "nlohmann/json.hpp"

namespace baton {

absl::StatusOr<std::string> parse_kv_transfer_config(std::string_view json_text) {
  using nlohmann::json;
  constexpr const char* kExample =
      R"({"kv_connector": "ExampleHiddenStatesConnector", "kv_role": "kv_producer", )"
      R"("kv_connector_extra_config": {"shared_storage_path": "DIR"}})";
  const json j = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(str_cat("--kv-transfer-config: expected a JSON object, e.g. ", kExample));
  }
  for (const auto& [key, value] : j.items()) {
    if (key != "kv_connector" && key != "kv_role" && key != "kv_connector_extra_config") {
      return absl::InvalidArgumentError(str_cat("--kv-transfer-config: `", key, "` is not a key Baton reads (it reads "
                                                "kv_connector, kv_role and kv_connector_extra_config, for "
                                                "extract_hidden_states; e.g. ", kExample, ")"));
    }
  }
  const auto connector = j.find("kv_connector");
  if (connector == j.end() || !connector->is_string() ||
      (*connector != "ExampleHiddenStatesConnector" && *connector != "OnlineHiddenStatesConnector")) {
    return absl::InvalidArgumentError(
        str_cat("--kv-transfer-config: `kv_connector` must be \"ExampleHiddenStatesConnector\" (Baton's only "
                "connector: the files of extract_hidden_states; its nodes move KV by themselves), got ",
                connector == j.end() ? std::string("nothing") : connector->dump()));
  }
  const auto role = j.find("kv_role");
  if (role != j.end() && *role != "kv_producer") {
    return absl::InvalidArgumentError(str_cat("--kv-transfer-config: `kv_role` must be \"kv_producer\", got ", role->dump()));
  }
  const auto extra = j.find("kv_connector_extra_config");
  if (extra == j.end() || !extra->is_object()) {
    return absl::InvalidArgumentError(str_cat("--kv-transfer-config: `kv_connector_extra_config` with "
                                              "shared_storage_path is required, e.g. ", kExample));
  }
  for (const auto& [key, value] : extra->items()) {
    if (key != "shared_storage_path") {
      return absl::InvalidArgumentError(str_cat("--kv-transfer-config: kv_connector_extra_config.`", key,
                                                "` is not supported (Baton reads shared_storage_path only; files are "
                                                "written uncompressed, at paths the server chooses, and appear "
                                                "complete under their final name)"));
    }
  }
  const auto path = extra->find("shared_storage_path");
  if (path == extra->end() || !path->is_string() || path->get<std::string>().empty() ||
      path->get<std::string>().find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(str_cat("--kv-transfer-config: kv_connector_extra_config.shared_storage_path "
                                              "must be a directory path, got ",
                                              path == extra->end() ? std::string("nothing") : path->dump()));
  }
  return path->get<std::string>();
}

}  // namespace baton
