#include "tokenizer/tokenizer_config.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "common/status.h"
#include "nlohmann/json.hpp"

namespace baton {

namespace {

absl::StatusOr<nlohmann::json> read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(str_cat(path, ": cannot open"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  auto parsed = nlohmann::json::parse(buffer.str(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return absl::InvalidArgumentError(str_cat(path, ": not valid JSON"));
  if (!parsed.is_object()) return absl::InvalidArgumentError(str_cat(path, ": expected a JSON object"));
  return parsed;
}

// A special token is either "text" or an AddedToken object {"content": "text", ...}.
absl::Status read_token(const nlohmann::json& obj, const std::string& file, const char* key,
                        std::optional<std::string>& out) {
  if (out) return absl::OkStatus();
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return absl::OkStatus();
  if (it->is_string()) {
    out = it->get<std::string>();
  } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    out = (*it)["content"].get<std::string>();
  } else {
    return absl::InvalidArgumentError(str_cat(file, ": \"", key, "\" must be a string or {\"content\": string}, got ",
                                              it->dump()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TokenizerConfig> load_tokenizer_config(const std::string& dir) {
  TokenizerConfig config;
  std::string path = (std::filesystem::path(dir) / "tokenizer_config.json").string();
  BATON_ASSIGN_OR_RETURN(nlohmann::json j, read_json(path));
  const std::pair<const char*, std::optional<std::string>*> slots[] = {
      {"bos_token", &config.bos_token}, {"eos_token", &config.eos_token},
      {"unk_token", &config.unk_token}, {"pad_token", &config.pad_token}};
  for (const auto& [key, slot] : slots) BATON_RETURN_IF_ERROR(read_token(j, path, key, *slot));
  if (auto it = j.find("chat_template"); it != j.end() && !it->is_null()) {
    if (it->is_string()) {
      config.chat_template = it->get<std::string>();
    } else if (it->is_array()) {
      for (const auto& entry : *it) {
        // Compared as JSON, not with value("name", ""): a name that is not a string would throw.
        if (entry.is_object() && entry.contains("name") && entry["name"] == "default" && entry.contains("template") &&
            entry["template"].is_string()) {
          config.chat_template = entry["template"].get<std::string>();
        }
      }
      if (!config.chat_template) {
        return absl::InvalidArgumentError(str_cat(path, ": chat_template is a list without a \"default\" entry"));
      }
    } else {
      return absl::InvalidArgumentError(str_cat(path, ": chat_template must be a string or a list of "
                                                      "{\"name\", \"template\"}, got ", it->type_name()));
    }
  }
  std::string map_path = (std::filesystem::path(dir) / "special_tokens_map.json").string();
  if (std::filesystem::exists(map_path)) {
    BATON_ASSIGN_OR_RETURN(nlohmann::json m, read_json(map_path));
    for (const auto& [key, slot] : slots) BATON_RETURN_IF_ERROR(read_token(m, map_path, key, *slot));
  }
  return config;
}

}  // namespace baton
