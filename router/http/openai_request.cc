#include "router/http/openai_request.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

#include "common/sampling_ranges.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "router/http/openai_tools.h"

namespace baton::router::http {
namespace {

using nlohmann::json;

std::string type_name(const json& v) { return v.type_name(); }

// The field when present and not null.
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

// Parses one request; throws ApiError on the first problem.
class Parser {
 public:
  // text: the body as sent (a JSON schema's properties are generated in the order it lists them,
  // which `body`, a sorted object, has lost).
  // auto_tool_choice: the server reads calls from output (--enable-auto-tool-choice).
  Parser(Endpoint endpoint, const json& body, std::string_view text = {}, bool auto_tool_choice = false)
      : endpoint_(endpoint), body_(body), text_(text), auto_tool_choice_(auto_tool_choice) {}

  OpenAiRequest parse(const std::string& served_model) {
    OpenAiRequest r;
    r.endpoint = endpoint_;
    const json* model = field(body_, "model");
    if (model == nullptr) throw bad_field("model", "model is required");
    r.model = string_of(*model, "model");
    if (r.model != served_model) {
      throw ApiError{404, str_cat("The model `", r.model, "` does not exist; this server serves `", served_model, "`"),
                     "invalid_request_error", "model", "model_not_found"};
    }
    refuse_unsupported();
    std::vector<baton::v1::GenerateRequest> prompts(1);
    if (endpoint_ == Endpoint::kCompletions) {
      if (field(body_, "messages") != nullptr) throw bad_field("messages", "messages belongs to /v1/chat/completions");
      prompts = this->prompts();
    } else {
      messages(prompts[0]);
    }
    sampling(r);
    // Tools need the body as written (their schemas' order); a chat without them is not parsed again.
    const bool tool_fields = field(body_, "tools") != nullptr || field(body_, "tool_choice") != nullptr ||
                             field(body_, "parallel_tool_calls") != nullptr;
    if (endpoint_ == Endpoint::kChat && tool_fields) {
      r.tools = parse_tools(ordered(), auto_tool_choice_, *prompts[0].mutable_chat(), *r.generate.mutable_sampling());
    }
    if (const json* id = field(body_, "request_id")) r.generate.set_request_id(string_of(*id, "request_id"));
    if (const json* salt = field(body_, "cache_salt")) r.generate.set_cache_salt(string_of(*salt, "cache_salt"));
    if (const json* n = field(body_, "n")) r.n = static_cast<int>(integer(*n, "n", 1, kMaxChoices));
    if (prompts.size() * static_cast<std::size_t>(r.n) > kMaxChoices) {
      throw bad_field(r.n > 1 ? "n" : "prompt", str_cat(prompts.size(), " prompts with n = ", r.n, " make ",
                                                       prompts.size() * static_cast<std::size_t>(r.n),
                                                       " choices; at most ", kMaxChoices));
    }
    // Each prompt's request: its prompt, and everything else the body set on `generate`.
    for (baton::v1::GenerateRequest& p : prompts) {
      baton::v1::GenerateRequest g = r.generate;
      if (p.has_text()) g.set_text(p.text());
      if (p.has_token_ids()) *g.mutable_token_ids() = p.token_ids();
      if (p.has_chat()) *g.mutable_chat() = p.chat();
      p = std::move(g);
    }
    r.generate = prompts[0];
    r.more_prompts.assign(prompts.begin() + 1, prompts.end());
    if (const json* s = field(body_, "stream")) r.stream = boolean(*s, "stream");
    if (const json* so = field(body_, "stream_options")) {
      if (!so->is_object()) throw bad_field("stream_options", str_cat("stream_options must be an object, got ", type_name(*so)));
      if (!r.stream) throw bad_field("stream_options", "stream_options is only allowed when stream is true");
      if (const json* u = field(*so, "include_usage")) r.include_usage = boolean(*u, "stream_options.include_usage");
    }
    return r;
  }

 private:
  // OpenAI fields this server does not implement: a request that uses one is refused naming it,
  // never served as if the field were not there. Their neutral values (no tools, a text response
  // format, echo false, best_of 1...) are accepted.
  void refuse_unsupported() {
    const auto refuse = [](const std::string& name, const std::string& what) {
      throw bad_field(name, str_cat(name, ": ", what, " is not supported by this server"));
    };
    const auto non_empty = [&](const char* name) {
      const json* v = field(body_, name);
      if (v == nullptr) return false;
      if (v->is_string()) return !v->get_ref<const std::string&>().empty();
      return !((v->is_array() || v->is_object()) && v->empty());
    };
    // The deprecated function-calling API; `tools` replaced it (openai_tools.h).
    if (non_empty("functions")) refuse("functions", "the deprecated `functions` (send `tools`)");
    if (const json* v = field(body_, "function_call"); v != nullptr && !(v->is_string() && (*v == "none" || *v == "auto"))) {
      refuse("function_call", "the deprecated `function_call` (send `tool_choice`)");
    }
    if (endpoint_ == Endpoint::kCompletions && non_empty("tools")) {
      throw bad_field("tools", "tools belongs to /v1/chat/completions");
    }
    if (non_empty("prediction")) refuse("prediction", "a predicted output");
    if (non_empty("audio")) refuse("audio", "audio output");
    if (const json* v = field(body_, "modalities"); v != nullptr && *v != json::array({"text"})) {
      refuse("modalities", "an output modality other than text");
    }
    if (endpoint_ == Endpoint::kCompletions) {
      if (const json* v = field(body_, "echo"); v != nullptr && *v != false) refuse("echo", "echo");
      if (non_empty("suffix")) refuse("suffix", "suffix (fill in the middle)");
      if (const json* v = field(body_, "best_of"); v != nullptr && *v != 1) refuse("best_of", "best_of other than 1");
    }
    const json* m = field(body_, "messages");
    if (m == nullptr || !m->is_array()) return;
    for (std::size_t i = 0; i < m->size(); ++i) {
      const json& msg = (*m)[i];
      if (!msg.is_object()) continue;  // messages() names that
      const std::string where = str_cat("messages[", i, "]");
      if (const json* v = field(msg, "function_call"); v != nullptr && !(v->is_object() && v->empty())) {
        refuse(where + ".function_call", "the deprecated `function_call` (send `tool_calls`)");
      }
      if (const json* role = field(msg, "role"); role != nullptr && *role == "function") {
        refuse(where + ".role", "a message of role function (the deprecated API; send role \"tool\")");
      }
    }
  }

  std::string string_of(const json& v, const std::string& name) {
    if (!v.is_string()) throw bad_field(name, str_cat(name, " must be a string, got ", type_name(v)));
    return v.get<std::string>();
  }
  bool boolean(const json& v, const std::string& name) {
    if (!v.is_boolean()) throw bad_field(name, str_cat(name, " must be a boolean, got ", type_name(v)));
    return v.get<bool>();
  }
  std::int64_t integer(const json& v, const std::string& name, std::int64_t lo, std::int64_t hi) {
    if (!v.is_number_integer()) throw bad_field(name, str_cat(name, " must be an integer, got ", type_name(v)));
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi)) {
      throw bad_field(name, str_cat(name, " must be in [", lo, ", ", hi, "], got ", v.dump()));
    }
    const std::int64_t x = v.get<std::int64_t>();
    if (x < lo || x > hi) throw bad_field(name, str_cat(name, " must be in [", lo, ", ", hi, "], got ", x));
    return x;
  }
  // OpenAI's {"type": "text" | "json_object" | "json_schema", "json_schema": {"schema": ...}}, kept
  // as JSON text in the order it was sent; the router compiles it before admission (request_limits.h).
  void response_format(const json& v, v1::SamplingParams& s) {
    const json* type = v.is_object() ? field(v, "type") : nullptr;
    if (type == nullptr || !type->is_string()) {
      throw bad_field("response_format", "response_format must be an object with a \"type\"");
    }
    if (*type == "text") return;
    if (*type == "json_object") {
      s.set_response_format(R"({"type":"json_object"})");
      return;
    }
    if (*type != "json_schema") {
      throw bad_field("response_format", str_cat("response_format.type must be \"text\", \"json_object\" or "
                                                 "\"json_schema\", got ", type->dump().substr(0, 64)));
    }
    const json* spec = field(v, "json_schema");
    if (spec == nullptr || !spec->is_object() || field(*spec, "schema") == nullptr) {
      throw bad_field("response_format", "response_format.json_schema.schema is required with type \"json_schema\"");
    }
    const nlohmann::ordered_json& body = ordered();
    s.set_response_format(body.contains("response_format") ? body["response_format"].dump() : v.dump());
  }

  // OpenAI's form: {"<token id>": bias, ...}, the ids as decimal strings.
  void parse_logit_bias(const json& v, v1::SamplingParams& s) {
    if (!v.is_object()) {
      throw bad_field("logit_bias", str_cat("logit_bias must be an object of token id -> bias, got ", type_name(v)));
    }
    if (v.size() > kMaxLogitBiasTokens) {
      throw bad_field("logit_bias", str_cat("logit_bias has ", v.size(), " tokens; at most ", kMaxLogitBiasTokens));
    }
    for (const auto& [key, bias] : v.items()) {
      std::int32_t id = -1;
      const auto [end, error] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (error != std::errc() || end != key.data() + key.size() || key.empty() || id < 0) {
        throw bad_field("logit_bias", str_cat("logit_bias: \"", key.substr(0, 32), "\" is not a token id"));
      }
      if (!bias.is_number() || !(std::fabs(bias.get<double>()) <= kMaxAbsLogitBias)) {
        throw bad_field("logit_bias", str_cat("logit_bias: the bias of token ", id, " must be a number in [-100, 100], got ",
                                              bias.dump().substr(0, 32)));
      }
      (*s.mutable_logit_bias())[id] = bias.get<float>();
    }
  }

  double number(const json& v, const std::string& name, double lo, double hi, bool lo_open = false) {
    if (!v.is_number()) throw bad_field(name, str_cat(name, " must be a number, got ", type_name(v)));
    const double x = v.get<double>();
    if (!std::isfinite(x) || x > hi || (lo_open ? x <= lo : x < lo)) {
      throw bad_field(name, str_cat(name, " must be in ", lo_open ? "(" : "[", lo, ", ", hi, "], got ", v.dump()));
    }
    return x;
  }

  std::vector<std::int32_t> token_ids(const json& v, const std::string& name) {
    std::vector<std::int32_t> ids;
    for (std::size_t i = 0; i < v.size(); ++i) {
      ids.push_back(static_cast<std::int32_t>(
          integer(v[i], str_cat(name, "[", i, "]"), 0, std::numeric_limits<std::int32_t>::max())));
    }
    return ids;
  }

  void set_ids(baton::v1::GenerateRequest& g, const std::vector<std::int32_t>& ids) {
    if (ids.empty()) throw bad_field("prompt", "prompt is empty");
    g.mutable_token_ids()->mutable_ids()->Assign(ids.begin(), ids.end());
  }

  // One request per prompt: a string, an array of token ids, or a list of those (OpenAI's forms).
  std::vector<baton::v1::GenerateRequest> prompts() {
    const json* p = field(body_, "prompt");
    if (p == nullptr) throw bad_field("prompt", "prompt is required");
    std::vector<baton::v1::GenerateRequest> out(1);
    if (p->is_string()) {
      out[0].set_text(p->get<std::string>());
      return out;
    }
    if (!p->is_array()) {
      throw bad_field("prompt", str_cat("prompt must be a string, an array of token ids, or an array of those; got ",
                                        type_name(*p)));
    }
    if (p->empty()) throw bad_field("prompt", "prompt is an empty array");
    if ((*p)[0].is_number()) {
      set_ids(out[0], token_ids(*p, "prompt"));
      return out;
    }
    if (p->size() > kMaxChoices) {
      throw bad_field("prompt", str_cat("prompt is a list of ", p->size(), " prompts; at most ", kMaxChoices));
    }
    out.resize(p->size());
    for (std::size_t i = 0; i < p->size(); ++i) {
      const json& one = (*p)[i];
      const std::string name = str_cat("prompt[", i, "]");
      if (one.is_string()) {
        out[i].set_text(one.get<std::string>());
      } else if (one.is_array()) {
        set_ids(out[i], token_ids(one, name));
      } else {
        throw bad_field(name, str_cat(name, " must be a string or an array of token ids, got ", type_name(one)));
      }
    }
    return out;
  }

  // POST /tokenize and /detokenize.
 public:
  baton::v1::TokenizeRequest tokenize(const std::string& served_model) {
    check_model_if_given(served_model);
    baton::v1::TokenizeRequest t;
    const json* text = field(body_, "prompt");
    if (text != nullptr) {
      if (field(body_, "messages") != nullptr) throw bad_field("messages", "send either prompt or messages, not both");
      t.set_text(string_of(*text, "prompt"));
      if (const json* a = field(body_, "add_special_tokens")) t.set_add_special_tokens(boolean(*a, "add_special_tokens"));
      return t;
    }
    if (field(body_, "messages") == nullptr) throw bad_field("prompt", "prompt (a string) or messages is required");
    baton::v1::GenerateRequest g;
    messages(g);
    // The tools reach the template; tool_choice only shapes generation, so it is not read here.
    if (field(body_, "tools") != nullptr) {
      baton::v1::SamplingParams unused;
      nlohmann::ordered_json only_tools = {{"tools", ordered()["tools"]}, {"tool_choice", "none"}};
      parse_tools(only_tools, false, *g.mutable_chat(), unused);
    }
    *t.mutable_chat() = std::move(*g.mutable_chat());
    if (const json* a = field(body_, "add_generation_prompt")) {
      t.mutable_chat()->set_add_generation_prompt(boolean(*a, "add_generation_prompt"));
    }
    return t;
  }

  std::vector<std::int32_t> detokenize(const std::string& served_model, std::int64_t vocab_size) {
    check_model_if_given(served_model);
    const json* tokens = field(body_, "tokens");
    if (tokens == nullptr) throw bad_field("tokens", "tokens (an array of token ids) is required");
    if (!tokens->is_array()) throw bad_field("tokens", str_cat("tokens must be an array of token ids, got ", type_name(*tokens)));
    std::vector<std::int32_t> ids;
    ids.reserve(tokens->size());
    for (std::size_t i = 0; i < tokens->size(); ++i) {
      ids.push_back(static_cast<std::int32_t>(integer((*tokens)[i], str_cat("tokens[", i, "]"), 0, vocab_size - 1)));
    }
    return ids;
  }

 private:
  void messages(baton::v1::GenerateRequest& g) {
    if (field(body_, "prompt") != nullptr) throw bad_field("prompt", "prompt belongs to /v1/completions; send messages");
    const json* m = field(body_, "messages");
    if (m == nullptr) throw bad_field("messages", "messages is required");
    if (!m->is_array() || m->empty()) throw bad_field("messages", "messages must be a non-empty array of messages");
    auto* chat = g.mutable_chat();
    for (std::size_t i = 0; i < m->size(); ++i) {
      const json& msg = (*m)[i];
      const std::string where = str_cat("messages[", i, "]");
      if (!msg.is_object()) throw bad_field(where, str_cat(where, " must be an object, got ", type_name(msg)));
      auto* out = chat->add_messages();
      const json* role = field(msg, "role");
      if (role == nullptr) throw bad_field(where + ".role", where + ".role is required");
      out->set_role(string_of(*role, where + ".role"));
      parse_message_tools(msg, where, *out);
      const json* content = field(msg, "content");
      if (content == nullptr) {
        // None only for an assistant's message of calls (templates test it); "" otherwise, as always.
        if (out->tool_calls_size() == 0) out->set_content("");
        continue;
      }
      if (content->is_string()) {
        out->set_content(content->get<std::string>());
        continue;
      }
      if (!content->is_array()) {
        throw bad_field(where + ".content",
                        str_cat(where, ".content must be a string or an array of text parts, got ", type_name(*content)));
      }
      std::string text;
      for (std::size_t k = 0; k < content->size(); ++k) {
        const json& part = (*content)[k];
        const std::string pw = str_cat(where, ".content[", k, "]");
        // Compared as JSON, not with value("type", ""): a non-string "type" would throw.
        const json* part_type = part.is_object() ? field(part, "type") : nullptr;
        if (part_type == nullptr || *part_type != "text" || !part.contains("text")) {
          throw bad_field(pw, pw + " must be {\"type\": \"text\", \"text\": ...}: only text parts are supported");
        }
        text += string_of(part["text"], pw + ".text");
      }
      out->set_content(text);
    }
  }

  void check_model_if_given(const std::string& served_model) {
    const json* model = field(body_, "model");
    if (model == nullptr) return;
    if (const std::string name = string_of(*model, "model"); name != served_model) {
      throw ApiError{404, str_cat("The model `", name, "` does not exist; this server serves `", served_model, "`"),
                     "invalid_request_error", "model", "model_not_found"};
    }
  }

  void sampling(OpenAiRequest& r) {
    auto& s = *r.generate.mutable_sampling();
    constexpr std::int64_t kIntMax = std::numeric_limits<std::int32_t>::max();
    const json* max_tokens = field(body_, "max_completion_tokens");
    const char* max_name = "max_completion_tokens";
    if (max_tokens == nullptr) {
      max_tokens = field(body_, "max_tokens");
      max_name = "max_tokens";
    }
    if (max_tokens != nullptr) {
      s.set_max_tokens(static_cast<std::int32_t>(integer(*max_tokens, max_name, 1, kIntMax)));
      r.max_tokens_given = true;
    }
    if (const json* v = field(body_, "temperature")) s.set_temperature(static_cast<float>(number(*v, "temperature", 0, 2)));
    if (const json* v = field(body_, "top_p")) s.set_top_p(static_cast<float>(number(*v, "top_p", 0, 1, /*lo_open=*/true)));
    if (const json* v = field(body_, "presence_penalty")) {
      s.set_presence_penalty(static_cast<float>(number(*v, "presence_penalty", -2, 2)));
    }
    if (const json* v = field(body_, "frequency_penalty")) {
      s.set_frequency_penalty(static_cast<float>(number(*v, "frequency_penalty", -2, 2)));
    }
    if (const json* v = field(body_, "repetition_penalty")) {
      s.set_repetition_penalty(static_cast<float>(number(*v, "repetition_penalty", 0, 1e6, true)));
    }
    if (const json* v = field(body_, "min_p")) s.set_min_p(static_cast<float>(number(*v, "min_p", 0, 1)));
    if (const json* v = field(body_, "top_k")) s.set_top_k(static_cast<std::int32_t>(integer(*v, "top_k", -1, kIntMax)));
    if (const json* v = field(body_, "min_tokens")) {
      s.set_min_tokens(static_cast<std::int32_t>(integer(*v, "min_tokens", 0, kIntMax)));
    }
    if (const json* v = field(body_, "ignore_eos")) s.set_ignore_eos(boolean(*v, "ignore_eos"));
    if (const json* v = field(body_, "max_speculative_tokens")) {
      s.set_max_speculative_tokens(static_cast<std::int32_t>(integer(*v, "max_speculative_tokens", 0, kIntMax)));
    }
    if (const json* v = field(body_, "seed")) {
      s.set_seed(static_cast<std::uint64_t>(
          integer(*v, "seed", std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max())));
    }
    if (const json* v = field(body_, "stop")) {
      if (v->is_string()) {
        s.add_stop(v->get<std::string>());
      } else if (v->is_array()) {
        for (std::size_t i = 0; i < v->size(); ++i) s.add_stop(string_of((*v)[i], str_cat("stop[", i, "]")));
      } else {
        throw bad_field("stop", str_cat("stop must be a string or an array of strings, got ", type_name(*v)));
      }
    }
    if (const json* v = field(body_, "stop_token_ids")) {
      if (!v->is_array()) throw bad_field("stop_token_ids", "stop_token_ids must be an array of token ids");
      for (std::int32_t id : token_ids(*v, "stop_token_ids")) s.add_stop_token_ids(id);
    }
    if (const json* v = field(body_, "logit_bias"); v != nullptr && !v->is_null()) parse_logit_bias(*v, s);
    if (const json* v = field(body_, "response_format"); v != nullptr && !v->is_null()) response_format(*v, s);
    if (endpoint_ == Endpoint::kCompletions) {
      if (const json* v = field(body_, "logprobs")) {
        r.top_logprobs = static_cast<int>(integer(*v, "logprobs", 0, 20));
        r.want_logprobs = true;
      }
    } else {
      if (const json* v = field(body_, "logprobs")) r.want_logprobs = boolean(*v, "logprobs");
      if (const json* v = field(body_, "top_logprobs")) {
        r.top_logprobs = static_cast<int>(integer(*v, "top_logprobs", 0, 20));
        if (!r.want_logprobs) throw bad_field("top_logprobs", "top_logprobs needs logprobs: true");
      }
    }
    if (r.want_logprobs) s.set_logprobs(r.top_logprobs);
  }

  // The body as written, parsed once when first needed (an object: body_ parsed).
  const nlohmann::ordered_json& ordered() {
    if (!ordered_) {
      ordered_ = nlohmann::ordered_json::parse(text_, nullptr, /*allow_exceptions=*/false);
      if (!ordered_->is_object()) ordered_ = body_;
    }
    return *ordered_;
  }

  const Endpoint endpoint_;
  const json& body_;
  const std::string_view text_;
  const bool auto_tool_choice_;
  std::optional<nlohmann::ordered_json> ordered_;
};

}  // namespace

std::vector<baton::v1::GenerateRequest> choice_requests(const OpenAiRequest& r) {
  std::vector<baton::v1::GenerateRequest> out;
  const std::size_t prompts = 1 + r.more_prompts.size();
  const bool several = prompts * static_cast<std::size_t>(r.n) > 1;
  for (std::size_t p = 0; p < prompts; ++p) {
    for (int j = 0; j < r.n; ++j) {
      baton::v1::GenerateRequest g = p == 0 ? r.generate : r.more_prompts[p - 1];
      if (j > 0 && g.sampling().has_seed()) g.mutable_sampling()->set_seed(g.sampling().seed() + static_cast<std::uint64_t>(j));
      if (several && !g.request_id().empty()) g.set_request_id(str_cat(g.request_id(), "-", out.size()));
      out.push_back(std::move(g));
    }
  }
  return out;
}

std::variant<OpenAiRequest, ApiError> parse_request(Endpoint endpoint, const std::string& body,
                                                    const std::string& served_model, bool auto_tool_choice) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad_field("", "the request body is not valid JSON");
  if (!j.is_object()) return bad_field("", str_cat("the request body must be a JSON object, got ", j.type_name()));
  try {
    return Parser(endpoint, j, body, auto_tool_choice).parse(served_model);
  } catch (const ApiError& e) {
    return e;
  }
}

namespace {

// The body as a JSON object, or the 400 that says why not.
std::variant<json, ApiError> object_body(const std::string& body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad_field("", "the request body is not valid JSON");
  if (!j.is_object()) return bad_field("", str_cat("the request body must be a JSON object, got ", j.type_name()));
  return j;
}

}  // namespace

std::variant<baton::v1::TokenizeRequest, ApiError> parse_tokenize(const std::string& body,
                                                                  const std::string& served_model) {
  auto j = object_body(body);
  if (auto* e = std::get_if<ApiError>(&j)) return *e;
  try {
    return Parser(Endpoint::kChat, std::get<json>(j), body).tokenize(served_model);
  } catch (const ApiError& e) {
    return e;
  }
}

std::variant<std::vector<std::int32_t>, ApiError> parse_detokenize(const std::string& body,
                                                                   const std::string& served_model,
                                                                   std::int64_t vocab_size) {
  auto j = object_body(body);
  if (auto* e = std::get_if<ApiError>(&j)) return *e;
  try {
    return Parser(Endpoint::kChat, std::get<json>(j)).detokenize(served_model, vocab_size);
  } catch (const ApiError& e) {
    return e;
  }
}

}  // namespace baton::router::http
