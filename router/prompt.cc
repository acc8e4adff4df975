#include "router/prompt.h"

#include <algorithm>

#include "common/status.h"
#include "nlohmann/json.hpp"

namespace baton::router {

using baton::v1::ChatMessages;
using baton::v1::GenerateRequest;
using baton::v1::TokenizeRequest;
using Json = nlohmann::ordered_json;

namespace {

// JSON text a client sent (a call's arguments, a tool's schema), parsed in its order.
absl::StatusOr<Json> json_field(const std::string& where, const std::string& text, const char* expected) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(str_cat(where, " must be ", expected, " as JSON text, got ",
                                              Json(text.substr(0, 64)).dump()));
  }
  return j;
}

// The messages as transformers' templates read them (OpenAI's shape): an assistant's calls with
// their arguments as objects (as vLLM passes them: templates print them with tojson), a tool
// message's tool_call_id and name.
absl::StatusOr<Json> template_messages(const std::string& field, const ChatMessages& chat) {
  Json messages = Json::array();
  for (int i = 0; i < chat.messages_size(); ++i) {
    const auto& m = chat.messages(i);
    Json message = {{"role", m.role()}, {"content", m.has_content() ? Json(m.content()) : Json()}};
    if (m.tool_calls_size() > 0) {
      Json calls = Json::array();
      for (int k = 0; k < m.tool_calls_size(); ++k) {
        const auto& call = m.tool_calls(k);
        BATON_ASSIGN_OR_RETURN(Json arguments,
                               json_field(str_cat(field, ".messages[", i, "].tool_calls[", k, "].arguments"),
                                          call.arguments(), "an object"));
        calls.push_back({{"id", call.id()},
                         {"type", "function"},
                         {"function", {{"name", call.name()}, {"arguments", std::move(arguments)}}}});
      }
      message["tool_calls"] = std::move(calls);
    }
    if (!m.tool_call_id().empty()) message["tool_call_id"] = m.tool_call_id();
    if (!m.name().empty()) message["name"] = m.name();
    messages.push_back(std::move(message));
  }
  return messages;
}

// OpenAI's tool list: {"type": "function", "function": {"name", "description", "parameters"}}.
absl::StatusOr<Json> template_tools(const std::string& field, const ChatMessages& chat) {
  Json tools = Json::array();
  for (int i = 0; i < chat.tools_size(); ++i) {
    const auto& t = chat.tools(i);
    const std::string where = str_cat(field, ".tools[", i, "]");
    if (t.name().empty()) return absl::InvalidArgumentError(str_cat(where, ".name is empty"));
    Json function = {{"name", t.name()}};
    if (t.has_description()) function["description"] = t.description();
    if (!t.parameters().empty()) {
      BATON_ASSIGN_OR_RETURN(function["parameters"],
                             json_field(where + ".parameters", t.parameters(), "a JSON Schema object"));
    }
    tools.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  return tools;
}

}  // namespace

absl::StatusOr<EncodedPrompt> PromptEncoder::encode_text(const std::string& field, const std::string& text,
                                                         bool add_special_tokens) const {
  if (tokenizer_ == nullptr) {
    return absl::InvalidArgumentError(str_cat(field, ": this router runs in token-id mode (its --model directory has "
                                              "no tokenizer files), so it cannot encode text; send prompt.token_ids"));
  }
  if (text.empty()) return absl::InvalidArgumentError(str_cat(field, " is empty"));
  EncodedPrompt out;
  out.ids = tokenizer_->encode(text, add_special_tokens);
  out.rendered = text;
  return out;
}

absl::StatusOr<EncodedPrompt> PromptEncoder::encode_chat(const std::string& field, const ChatMessages& chat) const {
  if (tokenizer_ == nullptr) {
    return absl::InvalidArgumentError(str_cat(field, ": this router runs in token-id mode (its --model directory has "
                                              "no tokenizer files), so it cannot render chat messages; send "
                                              "prompt.token_ids"));
  }
  if (chat.messages().empty()) return absl::InvalidArgumentError(str_cat(field, ".messages is empty"));
  if (!tokenizer_->has_chat_template()) {
    return absl::InvalidArgumentError(str_cat(field, ": this model's tokenizer_config.json has no chat_template; send "
                                              "prompt.text or prompt.token_ids instead"));
  }
  BATON_ASSIGN_OR_RETURN(const Json messages, template_messages(field, chat));
  BATON_ASSIGN_OR_RETURN(const Json tools, template_tools(field, chat));
  auto rendered = tokenizer_->apply_chat_template(
      messages, chat.has_add_generation_prompt() ? chat.add_generation_prompt() : true, tools);
  if (!rendered.ok()) {
    return absl::InvalidArgumentError(str_cat(field, ": the chat template failed: ", rendered.status().message()));
  }
  EncodedPrompt out;
  // The template writes BOS and the other special tokens itself (as cli/generate.cc encodes it).
  out.ids = tokenizer_->encode(*rendered, /*add_special_tokens=*/false);
  out.rendered = std::move(*rendered);
  if (out.ids.empty()) return absl::InvalidArgumentError(str_cat(field, " renders to an empty prompt"));
  return out;
}

absl::StatusOr<EncodedPrompt> PromptEncoder::encode(const GenerateRequest& request) const {
  switch (request.prompt_case()) {
    case GenerateRequest::kText:
      return encode_text("prompt.text", request.text(), /*add_special_tokens=*/true);
    case GenerateRequest::kChat:
      return encode_chat("prompt.chat", request.chat());
    case GenerateRequest::kTokenIds: {
      if (request.token_ids().ids().empty()) return absl::InvalidArgumentError("prompt.token_ids is empty");
      EncodedPrompt out;
      out.ids.assign(request.token_ids().ids().begin(), request.token_ids().ids().end());
      return out;
    }
    case GenerateRequest::PROMPT_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("prompt is missing: set one of prompt.text, prompt.token_ids or prompt.chat");
}

absl::StatusOr<EncodedPrompt> PromptEncoder::encode(const TokenizeRequest& request) const {
  switch (request.prompt_case()) {
    case TokenizeRequest::kText:
      return encode_text("prompt.text", request.text(),
                         request.has_add_special_tokens() ? request.add_special_tokens() : true);
    case TokenizeRequest::kChat:
      return encode_chat("prompt.chat", request.chat());
    case TokenizeRequest::PROMPT_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("prompt is missing: set prompt.text or prompt.chat");
}

absl::Status check_prompt_limits(const std::vector<std::int32_t>& ids, const baton::v1::SamplingParams& sampling,
                                 std::int32_t vocab_size, std::int32_t max_model_len, const std::string& where) {
  if (vocab_size > 0) {
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= vocab_size) {
        return absl::InvalidArgumentError(str_cat("prompt.token_ids[", i, "] = ", ids[i], " is outside [0, ",
                                                  vocab_size, ") (vocab_size of ", where, ")"));
      }
    }
  }
  if (max_model_len > 0) {
    const std::int64_t max_tokens = sampling.has_max_tokens() ? sampling.max_tokens() : kDefaultMaxTokens;
    const std::int64_t total = static_cast<std::int64_t>(ids.size()) + std::max<std::int64_t>(max_tokens, 0);
    if (total > max_model_len) {
      return absl::InvalidArgumentError(str_cat(
          "prompt (", ids.size(), " tokens) + sampling.max_tokens (", max_tokens,
          sampling.has_max_tokens() ? "" : ", the default", ") = ", total, " exceeds max_model_len ", max_model_len,
          " of ", where, "; shorten the prompt or lower sampling.max_tokens"));
    }
  }
  return absl::OkStatus();
}

}  // namespace baton::router
