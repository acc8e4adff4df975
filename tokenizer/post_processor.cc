#include "tokenizer/post_processor.h"

#include "common/status.h"
#include "tokenizer/json_fields.h"

namespace baton {

namespace {

struct Parts {
  std::vector<std::int32_t> prefix, suffix;
};

// A token id as the file gives it: an integer in [0, 2^31 - 1] (get<std::int32_t>() would throw on
// other types and truncate or, for floats, overflow on other values).
absl::StatusOr<std::int32_t> token_id(const nlohmann::json& v, const std::string& where) {
  if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() > INT32_MAX) {
    return absl::InvalidArgumentError(str_cat(where, ": expected a token id (an integer in [0, 2^31)), got ",
                                              v.dump().substr(0, 80)));
  }
  return static_cast<std::int32_t>(v.get<long long>());
}

absl::StatusOr<std::int32_t> id_of_pair(const nlohmann::json& config, const std::string& where, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || !it->is_array() || it->size() != 2) {
    return absl::InvalidArgumentError(str_cat(where, ".", key, ": expected [token, id]"));
  }
  return token_id((*it)[1], str_cat(where, ".", key, "[1]"));
}

absl::Status collect(const nlohmann::json& config, const std::string& where, Parts& parts) {
  BATON_ASSIGN_OR_RETURN(std::string type, json_fields::get_type(config, where));
  if (type == "ByteLevel") return absl::OkStatus();
  if (type == "Sequence") {
    auto it = config.find("processors");
    if (it == config.end() || !it->is_array()) {
      return absl::InvalidArgumentError(str_cat(where, ".processors: expected an array"));
    }
    for (std::size_t i = 0; i < it->size(); ++i) {
      BATON_RETURN_IF_ERROR(collect((*it)[i], str_cat(where, ".processors[", i, "]"), parts));
    }
    return absl::OkStatus();
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    BATON_ASSIGN_OR_RETURN(std::int32_t cls, id_of_pair(config, where, "cls"));
    BATON_ASSIGN_OR_RETURN(std::int32_t sep, id_of_pair(config, where, "sep"));
    parts.prefix.insert(parts.prefix.begin(), cls);
    parts.suffix.push_back(sep);
    return absl::OkStatus();
  }
  if (type == "TemplateProcessing") {
    auto single = config.find("single");
    auto specials = config.find("special_tokens");
    if (single == config.end() || !single->is_array()) {
      return absl::InvalidArgumentError(str_cat(where, ".single: expected an array"));
    }
    Parts local;
    bool seen_sequence = false;
    for (std::size_t i = 0; i < single->size(); ++i) {
      const auto& piece = (*single)[i];
      std::string at = str_cat(where, ".single[", i, "]");
      if (piece.contains("Sequence")) {
        if (seen_sequence) return absl::InvalidArgumentError(str_cat(at, ": more than one sequence in a single template"));
        seen_sequence = true;
        continue;
      }
      if (!piece.contains("SpecialToken") || !piece["SpecialToken"].is_object()) {
        return absl::InvalidArgumentError(str_cat(at, ": expected {\"SpecialToken\": ...} or {\"Sequence\": ...}"));
      }
      BATON_ASSIGN_OR_RETURN(std::string name, json_fields::get_string(piece["SpecialToken"], at + ".SpecialToken", "id"));
      if (specials == config.end() || !specials->contains(name)) {
        return absl::InvalidArgumentError(str_cat(at, ": special token \"", name, "\" is not in ", where, ".special_tokens"));
      }
      // find(), not operator[]: the entry may be anything, and a missing "ids" must not be read.
      const auto& entry = (*specials)[name];
      const auto ids = entry.is_object() ? entry.find("ids") : entry.end();
      if (ids == entry.end() || !ids->is_array()) {
        return absl::InvalidArgumentError(str_cat(where, ".special_tokens.", name, ".ids: expected an array"));
      }
      auto& target = seen_sequence ? local.suffix : local.prefix;
      for (std::size_t k = 0; k < ids->size(); ++k) {
        BATON_ASSIGN_OR_RETURN(std::int32_t id, token_id((*ids)[k], str_cat(where, ".special_tokens.", name, ".ids[", k, "]")));
        target.push_back(id);
      }
    }
    if (!seen_sequence) return absl::InvalidArgumentError(str_cat(where, ".single: no {\"Sequence\": ...} entry"));
    parts.prefix.insert(parts.prefix.begin(), local.prefix.begin(), local.prefix.end());
    parts.suffix.insert(parts.suffix.end(), local.suffix.begin(), local.suffix.end());
    return absl::OkStatus();
  }
  return json_fields::unsupported(where, "post-processor", type,
                                  "TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, Sequence");
}

}  // namespace

absl::StatusOr<std::unique_ptr<PostProcessor>> make_post_processor(const nlohmann::json& config,
                                                                   const std::string& where) {
  Parts parts;
  BATON_RETURN_IF_ERROR(collect(config, where, parts));
  return std::make_unique<PostProcessor>(std::move(parts.prefix), std::move(parts.suffix));
}

}  // namespace baton
