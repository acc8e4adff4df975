#include "convert.h"

#include <type_traits>

namespace baton::client_internal {

namespace {

void set_chat(const ChatPrompt& chat, v1::ChatMessages* out) {
  for (const ChatMessage& m : chat.messages) {
    v1::ChatMessage* c = out->add_messages();
    c->set_role(m.role);
    c->set_content(m.content);
  }
  if (chat.add_generation_prompt) out->set_add_generation_prompt(*chat.add_generation_prompt);
}

v1::SamplingParams to_proto(const SamplingParams& s) {
  v1::SamplingParams p;
  if (s.temperature) p.set_temperature(*s.temperature);
  if (s.top_k) p.set_top_k(*s.top_k);
  if (s.top_p) p.set_top_p(*s.top_p);
  if (s.min_p) p.set_min_p(*s.min_p);
  if (s.repetition_penalty) p.set_repetition_penalty(*s.repetition_penalty);
  if (s.presence_penalty) p.set_presence_penalty(*s.presence_penalty);
  if (s.frequency_penalty) p.set_frequency_penalty(*s.frequency_penalty);
  if (s.seed) p.set_seed(*s.seed);
  if (s.max_tokens) p.set_max_tokens(*s.max_tokens);
  if (s.min_tokens) p.set_min_tokens(*s.min_tokens);
  for (std::int32_t id : s.stop_token_ids) p.add_stop_token_ids(id);
  for (const std::string& stop : s.stop) p.add_stop(stop);
  for (const auto& [token, bias] : s.logit_bias) (*p.mutable_logit_bias())[token] = bias;
  p.set_response_format(s.response_format);
  if (s.ignore_eos) p.set_ignore_eos(*s.ignore_eos);
  if (s.include_stop_str_in_output) p.set_include_stop_str_in_output(*s.include_stop_str_in_output);
  if (s.logprobs) p.set_logprobs(*s.logprobs);
  return p;
}

FinishReason from_proto(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_STOP: return FinishReason::kStop;
    case v1::FINISH_REASON_LENGTH: return FinishReason::kLength;
    case v1::FINISH_REASON_ABORT: return FinishReason::kAbort;
    case v1::FINISH_REASON_ERROR: return FinishReason::kError;
    default: return FinishReason::kNone;
  }
}

Usage from_proto(const v1::Usage& u) {
  Usage out;
  out.prompt_tokens = u.prompt_tokens();
  out.completion_tokens = u.completion_tokens();
  out.cached_prompt_tokens = u.cached_prompt_tokens();
  out.speculation.num_drafts = u.speculation().num_drafts();
  out.speculation.num_draft_tokens = u.speculation().num_draft_tokens();
  out.speculation.num_accepted_tokens = u.speculation().num_accepted_tokens();
  out.speculation.accepted_per_position.assign(u.speculation().accepted_per_position().begin(),
                                               u.speculation().accepted_per_position().end());
  out.speculation.proposals_by_length.assign(u.speculation().proposals_by_length().begin(),
                                             u.speculation().proposals_by_length().end());
  out.speculation.lossy = u.speculation().lossy();
  const v1::Timings& t = u.timings();
  out.timings = {t.time_to_first_token_ms(), t.end_to_end_ms(), t.prefill_ms(), t.kv_transfer_ms(), t.router_queue_ms()};
  out.prefill_node = u.prefill_node();
  out.decode_node = u.decode_node();
  out.local_prefill = u.local_prefill();
  out.transport = u.transport();
  return out;
}

}  // namespace

v1::GenerateRequest to_proto(const GenerateRequest& request) {
  v1::GenerateRequest r;
  r.set_request_id(request.request_id);
  std::visit(
      [&r](const auto& prompt) {
        using T = std::decay_t<decltype(prompt)>;
        if constexpr (std::is_same_v<T, std::string>) {
          r.set_text(prompt);
        } else if constexpr (std::is_same_v<T, std::vector<std::int32_t>>) {
          r.mutable_token_ids()->mutable_ids()->Add(prompt.begin(), prompt.end());
        } else {
          set_chat(prompt, r.mutable_chat());
        }
      },
      request.prompt);
  *r.mutable_sampling() = to_proto(request.sampling);
  r.set_force_local_prefill(request.force_local_prefill);
  return r;
}

v1::TokenizeRequest to_proto(const TokenizeRequest& request) {
  v1::TokenizeRequest r;
  if (const auto* text = std::get_if<std::string>(&request.prompt)) {
    r.set_text(*text);
  } else {
    set_chat(std::get<ChatPrompt>(request.prompt), r.mutable_chat());
  }
  if (request.add_special_tokens) r.set_add_special_tokens(*request.add_special_tokens);
  return r;
}

Delta from_proto(v1::GenerateResponse& m) {
  Delta d;
  d.request_id = std::move(*m.mutable_request_id());
  d.token_ids.assign(m.token_ids().begin(), m.token_ids().end());
  d.text = std::move(*m.mutable_text());
  for (const v1::TokenLogprob& l : m.logprobs()) {
    TokenLogprob t{l.token(), l.logprob(), {}};
    for (const v1::TopLogprob& top : l.top()) t.top.push_back({top.token(), top.logprob()});
    d.logprobs.push_back(std::move(t));
  }
  d.finish_reason = from_proto(m.finish_reason());
  d.error = std::move(*m.mutable_error());
  if (m.has_stop_token()) d.stop_token = m.stop_token();
  if (m.has_stop_string()) d.stop_string = m.stop_string();
  if (d.finish_reason != FinishReason::kNone) d.usage = from_proto(m.usage());
  d.hidden_states_path = m.kv_transfer_params().hidden_states_path();
  return d;
}

ModelInfo from_proto(const v1::ModelInfo& i) {
  return {i.model(),         i.vocab_size(),         i.max_model_len(),     i.has_tokenizer(),
          i.has_chat_template(), i.speculative_config(), i.num_prefill_nodes(), i.num_decode_nodes(),
          i.backend()};
}

Status from_grpc(const grpc::Status& status) {
  return Status(static_cast<StatusCode>(status.error_code()), status.error_message());
}

}  // namespace baton::client_internal
