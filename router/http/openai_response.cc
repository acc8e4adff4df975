#include "router/http/openai_response.h"

#include <algorithm>
#include <random>

#include "common/status.h"
#include "tokenizer/tokenizer.h"

namespace baton::router::http {
namespace {

using nlohmann::json;

std::string token_text(const Tokenizer* tokenizer, std::int32_t id) {
  if (tokenizer == nullptr) return str_cat("token_id:", id);
  const std::int32_t ids[] = {id};
  return tokenizer->decode(ids, /*skip_special_tokens=*/false);
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// Completions' logprobs: parallel arrays; text_offset counts bytes of the completion so far.
json completion_logprobs(const ResponseContext& c, const std::vector<baton::v1::TokenLogprob>& lps,
                         std::size_t* text_offset) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
  for (const auto& lp : lps) {
    const std::string t = token_text(c.tokenizer, lp.token());
    tokens.push_back(t);
    token_logprobs.push_back(lp.logprob());
    json alternatives = json::object();
    for (const auto& alt : lp.top()) alternatives[token_text(c.tokenizer, alt.token())] = alt.logprob();
    top.push_back(alternatives);
    offsets.push_back(*text_offset);
    *text_offset += t.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

// Chat's logprobs: one entry per token, with bytes.
json chat_logprobs(const ResponseContext& c, const std::vector<baton::v1::TokenLogprob>& lps) {
  json content = json::array();
  for (const auto& lp : lps) {
    const std::string t = token_text(c.tokenizer, lp.token());
    json top = json::array();
    for (const auto& alt : lp.top()) {
      const std::string a = token_text(c.tokenizer, alt.token());
      top.push_back({{"token", a}, {"logprob", alt.logprob()}, {"bytes", bytes_of(a)}});
    }
    content.push_back({{"token", t}, {"logprob", lp.logprob()}, {"bytes", bytes_of(t)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json logprobs_json(const ResponseContext& c, const std::vector<baton::v1::TokenLogprob>& lps, std::size_t* offset) {
  if (!c.want_logprobs) return nullptr;
  return c.endpoint == Endpoint::kChat ? chat_logprobs(c, lps) : completion_logprobs(c, lps, offset);
}

std::vector<baton::v1::TokenLogprob> logprobs_of(const baton::v1::GenerateResponse& m) {
  return {m.logprobs().begin(), m.logprobs().end()};
}

// The parser that reads this choice's output for tool calls; null when it is all content.
std::unique_ptr<ToolCallParser> tool_parser_for(const ResponseContext& c) {
  if (c.endpoint != Endpoint::kChat) return nullptr;
  switch (c.tools.choice) {
    case ToolChoice::kNone: return nullptr;
    case ToolChoice::kAuto: return c.tool_parser ? make_tool_call_parser(*c.tool_parser) : nullptr;
    case ToolChoice::kRequired: return make_required_calls_parser();
    case ToolChoice::kNamed: return make_named_call_parser(c.tools.name);
  }
  return nullptr;
}

// "call_" and 24 random hex digits, as OpenAI's ids look.
std::string new_call_id() {
  thread_local std::mt19937_64 random{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kHex[random() & 15];
  return id;
}

// Calls past the first are dropped with parallel_tool_calls false (tool_choice "auto": the
// constrained modes make one call then).
void keep_allowed_calls(const ResponseContext& c, ParsedText& parsed) {
  if (c.tools.parallel) return;
  std::erase_if(parsed.calls, [](const ToolCallPart& p) { return p.index > 0; });
}

json finish_reason_for(const ResponseContext& c, baton::v1::FinishReason reason, bool made_calls) {
  if (made_calls && reason == baton::v1::FINISH_REASON_STOP && c.tools.choice != ToolChoice::kNamed) {
    return "tool_calls";
  }
  return finish_reason_json(reason);
}

}  // namespace

json finish_reason_json(baton::v1::FinishReason reason) {
  switch (reason) {
    case baton::v1::FINISH_REASON_STOP: return "stop";
    case baton::v1::FINISH_REASON_LENGTH: return "length";
    case baton::v1::FINISH_REASON_ABORT: return "abort";
    case baton::v1::FINISH_REASON_ERROR: return "error";
    default: return nullptr;
  }
}

json usage_json(const baton::v1::Usage& u) {
  const auto& s = u.speculation();
  return {{"prompt_tokens", u.prompt_tokens()},
          {"completion_tokens", u.completion_tokens()},
          {"total_tokens", u.prompt_tokens() + u.completion_tokens()},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_prompt_tokens()}}},
          {"speculation",
           {{"num_drafts", s.num_drafts()},
            {"num_draft_tokens", s.num_draft_tokens()},
            {"num_accepted_tokens", s.num_accepted_tokens()},
            {"lossy", s.lossy()}}}};
}

void CompletionBody::add(const baton::v1::GenerateResponse& m) {
  text_ += m.text();
  logprobs_.insert(logprobs_.end(), m.logprobs().begin(), m.logprobs().end());
  if (m.finish_reason() != baton::v1::FINISH_REASON_UNSPECIFIED) {
    finish_ = m.finish_reason();
    error_ = m.error();
    usage_ = m.usage();
    hidden_states_path_ = m.kv_transfer_params().hidden_states_path();
  }
}

baton::v1::Usage merged_usage(const std::vector<const baton::v1::Usage*>& by_choice, int n) {
  baton::v1::Usage u;
  if (by_choice.empty()) return u;
  u = *by_choice.front();
  auto& s = *u.mutable_speculation();
  s.clear_accepted_per_position();
  s.clear_proposals_by_length();
  u.set_prompt_tokens(0);
  u.set_cached_prompt_tokens(0);
  u.set_completion_tokens(0);
  s.set_num_drafts(0);
  s.set_num_draft_tokens(0);
  s.set_num_accepted_tokens(0);
  for (std::size_t i = 0; i < by_choice.size(); ++i) {
    const baton::v1::Usage& c = *by_choice[i];
    if (i % static_cast<std::size_t>(std::max(n, 1)) == 0) {
      u.set_prompt_tokens(u.prompt_tokens() + c.prompt_tokens());
      u.set_cached_prompt_tokens(u.cached_prompt_tokens() + c.cached_prompt_tokens());
    }
    u.set_completion_tokens(u.completion_tokens() + c.completion_tokens());
    s.set_num_drafts(s.num_drafts() + c.speculation().num_drafts());
    s.set_num_draft_tokens(s.num_draft_tokens() + c.speculation().num_draft_tokens());
    s.set_num_accepted_tokens(s.num_accepted_tokens() + c.speculation().num_accepted_tokens());
    s.set_lossy(s.lossy() || c.speculation().lossy());
  }
  return u;
}

json completion_body(const ResponseContext& context, json choices, const baton::v1::Usage& usage) {
  const bool chat = context.endpoint == Endpoint::kChat;
  json kv_params;
  if (choices.size() == 1 && choices[0].contains("kv_transfer_params")) kv_params = choices[0]["kv_transfer_params"];
  json body = {{"id", context.id},
               {"object", chat ? "chat.completion" : "text_completion"},
               {"created", context.created},
               {"model", context.model},
               {"choices", std::move(choices)},
               {"usage", usage_json(usage)}};
  if (!kv_params.is_null()) body["kv_transfer_params"] = std::move(kv_params);
  return body;
}

namespace {

json kv_transfer_params_json(const std::string& hidden_states_path) {
  return {{"hidden_states_path", hidden_states_path}};
}

}  // namespace

json CompletionBody::choice() const {
  std::size_t offset = 0;
  json choice = {{"index", context_.index}, {"logprobs", logprobs_json(context_, logprobs_, &offset)},
                 {"finish_reason", finish_reason_json(finish_)}};
  if (!hidden_states_path_.empty()) choice["kv_transfer_params"] = kv_transfer_params_json(hidden_states_path_);
  if (context_.endpoint != Endpoint::kChat) {
    choice["text"] = text_;
    return choice;
  }
  std::unique_ptr<ToolCallParser> parser = tool_parser_for(context_);
  if (parser == nullptr) {
    choice["message"] = {{"role", "assistant"}, {"content", text_}};
    return choice;
  }
  // The same parser as a stream's, fed the whole text: the same content and calls.
  ParsedText parsed = parser->feed(text_);
  ParsedText rest = parser->finish();
  parsed.content += rest.content;
  for (ToolCallPart& part : rest.calls) parsed.calls.push_back(std::move(part));
  keep_allowed_calls(context_, parsed);
  json calls = json::array();
  for (const ToolCallPart& part : parsed.calls) {
    if (part.index >= calls.size()) {
      calls.push_back({{"id", new_call_id()}, {"type", "function"}, {"function", {{"name", part.name}, {"arguments", ""}}}});
    }
    calls[part.index]["function"]["arguments"] =
        calls[part.index]["function"]["arguments"].get<std::string>() + part.arguments;
  }
  const bool made_calls = !calls.empty();
  choice["message"] = {{"role", "assistant"}, {"content", parsed.content.empty() && made_calls ? json() : json(parsed.content)}};
  if (made_calls) choice["message"]["tool_calls"] = std::move(calls);
  choice["finish_reason"] = finish_reason_for(context_, finish_, made_calls);
  return choice;
}

json CompletionBody::body() const { return completion_body(context_, json::array({choice()}), usage_); }

namespace {

json chunk_of(const ResponseContext& context, json choice) {
  json c = {{"id", context.id},
            {"object", context.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
            {"created", context.created},
            {"model", context.model},
            {"choices", json::array()}};
  if (!choice.is_null()) c["choices"].push_back(std::move(choice));
  if (context.include_usage) c["usage"] = nullptr;
  return c;
}

}  // namespace

json usage_chunk(const ResponseContext& context, const baton::v1::Usage& usage) {
  json u = chunk_of(context, nullptr);
  u["usage"] = usage_json(usage);
  return u;
}

json CompletionChunks::chunk(json choice) const { return chunk_of(context_, std::move(choice)); }

CompletionChunks::CompletionChunks(ResponseContext context)
    : context_(std::move(context)), tool_parser_(tool_parser_for(context_)) {}

std::vector<json> CompletionChunks::on_message(const baton::v1::GenerateResponse& m) {
  std::vector<json> out;
  const bool chat = context_.endpoint == Endpoint::kChat;
  if (chat && !role_sent_) {
    out.push_back(chunk({{"index", context_.index}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr},
                         {"finish_reason", nullptr}}));
    role_sent_ = true;
  }
  const bool finished = m.finish_reason() != baton::v1::FINISH_REASON_UNSPECIFIED;
  if (tool_parser_ != nullptr) {
    // Content and calls as the parser releases them; a chunk only when it says something (or
    // carries the tokens' logprobs).
    ParsedText parsed = tool_parser_->feed(m.text());
    if (finished) {
      ParsedText rest = tool_parser_->finish();
      parsed.content += rest.content;
      for (ToolCallPart& part : rest.calls) parsed.calls.push_back(std::move(part));
    }
    keep_allowed_calls(context_, parsed);
    json delta = json::object();
    if (!parsed.content.empty()) delta["content"] = parsed.content;
    if (!parsed.calls.empty()) {
      json calls = json::array();
      for (const ToolCallPart& part : parsed.calls) {
        json call = {{"index", part.index}};
        if (part.index >= call_ids_.size()) {
          call_ids_.push_back(new_call_id());
          call["id"] = call_ids_.back();
          call["type"] = "function";
          call["function"] = {{"name", part.name}, {"arguments", part.arguments}};
        } else {
          call["function"] = {{"arguments", part.arguments}};
        }
        calls.push_back(std::move(call));
      }
      delta["tool_calls"] = std::move(calls);
    }
    const json logprobs = logprobs_json(context_, logprobs_of(m), &text_offset_);
    if (!delta.empty() || (!logprobs.is_null() && m.logprobs_size() > 0)) {
      if (delta.empty()) delta["content"] = "";
      out.push_back(chunk({{"index", context_.index}, {"delta", std::move(delta)}, {"logprobs", logprobs},
                           {"finish_reason", nullptr}}));
    }
  } else if (!m.text().empty() || m.token_ids_size() > 0) {
    json choice = {{"index", context_.index}, {"logprobs", logprobs_json(context_, logprobs_of(m), &text_offset_)},
                   {"finish_reason", nullptr}};
    if (chat) choice["delta"] = {{"content", m.text()}};
    else choice["text"] = m.text();
    out.push_back(chunk(std::move(choice)));
  }
  if (finished) {
    json choice = {{"index", context_.index}, {"logprobs", nullptr},
                   {"finish_reason", finish_reason_for(context_, m.finish_reason(), !call_ids_.empty())}};
    if (chat) choice["delta"] = json::object();
    else choice["text"] = "";
    const std::string& path = m.kv_transfer_params().hidden_states_path();
    if (!path.empty()) choice["kv_transfer_params"] = kv_transfer_params_json(path);
    json last = chunk(std::move(choice));
    if (!path.empty() && !context_.shared_usage) last["kv_transfer_params"] = kv_transfer_params_json(path);
    out.push_back(std::move(last));
    usage_ = m.usage();
    if (context_.include_usage && !context_.shared_usage) out.push_back(usage_chunk(context_, m.usage()));
  }
  return out;
}

}  // namespace baton::router::http
