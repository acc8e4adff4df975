#include "node_common/convert.h"

#include <algorithm>
#include <cstring>

#include "common/status.h"

namespace baton {

SamplingParams sampling_from_proto(const v1::SamplingParams& p) {
  SamplingParams s;
  if (p.has_temperature()) s.temperature = p.temperature();
  if (p.has_top_k()) s.top_k = p.top_k();
  if (p.has_top_p()) s.top_p = p.top_p();
  if (p.has_min_p()) s.min_p = p.min_p();
  if (p.has_repetition_penalty()) s.repetition_penalty = p.repetition_penalty();
  if (p.has_presence_penalty()) s.presence_penalty = p.presence_penalty();
  if (p.has_frequency_penalty()) s.frequency_penalty = p.frequency_penalty();
  if (p.has_seed()) s.seed = p.seed();
  if (p.has_max_tokens()) s.max_tokens = p.max_tokens();
  if (p.has_min_tokens()) s.min_tokens = p.min_tokens();
  s.stop_token_ids.assign(p.stop_token_ids().begin(), p.stop_token_ids().end());
  s.stop.assign(p.stop().begin(), p.stop().end());
  if (p.has_ignore_eos()) s.ignore_eos = p.ignore_eos();
  if (p.has_include_stop_str_in_output()) s.include_stop_str_in_output = p.include_stop_str_in_output();
  if (p.has_logprobs()) s.logprobs = p.logprobs();
  if (p.has_max_speculative_tokens()) s.max_speculative_tokens = p.max_speculative_tokens();
  s.logit_bias.assign(p.logit_bias().begin(), p.logit_bias().end());
  s.response_format = p.response_format();
  std::sort(s.logit_bias.begin(), s.logit_bias.end());  // a map's order is unspecified
  return s;
}

v1::SamplingParams sampling_to_proto(const SamplingParams& s) {
  v1::SamplingParams p;
  p.set_temperature(s.temperature);
  p.set_top_k(s.top_k);
  p.set_top_p(s.top_p);
  p.set_min_p(s.min_p);
  p.set_repetition_penalty(s.repetition_penalty);
  p.set_presence_penalty(s.presence_penalty);
  p.set_frequency_penalty(s.frequency_penalty);
  if (s.seed) p.set_seed(*s.seed);
  p.set_max_tokens(s.max_tokens);
  p.set_min_tokens(s.min_tokens);
  for (std::int32_t id : s.stop_token_ids) p.add_stop_token_ids(id);
  for (const std::string& stop : s.stop) p.add_stop(stop);
  p.set_ignore_eos(s.ignore_eos);
  p.set_include_stop_str_in_output(s.include_stop_str_in_output);
  p.set_logprobs(s.logprobs);
  if (s.max_speculative_tokens) p.set_max_speculative_tokens(*s.max_speculative_tokens);
  for (const auto& [token, bias] : s.logit_bias) (*p.mutable_logit_bias())[token] = bias;
  p.set_response_format(s.response_format);
  return p;
}

v1::FinishReason finish_reason_to_proto(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return v1::FINISH_REASON_STOP;
    case FinishReason::kLength: return v1::FINISH_REASON_LENGTH;
    case FinishReason::kAbort: return v1::FINISH_REASON_ABORT;
    case FinishReason::kError: return v1::FINISH_REASON_ERROR;
    case FinishReason::kNone: break;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

FinishReason finish_reason_from_proto(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_STOP: return FinishReason::kStop;
    case v1::FINISH_REASON_LENGTH: return FinishReason::kLength;
    case v1::FINISH_REASON_ABORT: return FinishReason::kAbort;
    case v1::FINISH_REASON_ERROR: return FinishReason::kError;
    default: return FinishReason::kNone;
  }
}

v1::TokenLogprob token_logprob_to_proto(const TokenOutput& t) {
  v1::TokenLogprob p;
  p.set_token(t.token);
  p.set_logprob(t.logprob);
  for (const TokenLogprob& top : t.top_logprobs) {
    v1::TopLogprob* q = p.add_top();
    q->set_token(top.token);
    q->set_logprob(top.logprob);
  }
  return p;
}

node::v1::HandoffRecord handoff_to_proto(const HandoffRecord& h) {
  node::v1::HandoffRecord p;
  p.set_request_id(h.request_id);
  p.mutable_prompt()->Add(h.prompt.begin(), h.prompt.end());
  *p.mutable_sampling() = sampling_to_proto(h.params);
  p.set_seed(h.seed);
  p.set_cache_salt(h.cache_salt);
  p.set_state_group(h.state_group);
  p.set_state_slot(h.state_slot);
  p.set_first_token(h.first_token);
  p.set_first_logprob(h.first_logprob);
  for (const TokenLogprob& t : h.first_top_logprobs) {
    v1::TopLogprob* q = p.add_first_top_logprobs();
    q->set_token(t.token);
    q->set_logprob(t.logprob);
  }
  p.set_num_cached_prompt_tokens(h.num_cached_prompt_tokens);
  p.mutable_kv_blocks()->Add(h.kv_blocks.begin(), h.kv_blocks.end());
  p.set_proposer_kv_positions(h.proposer.kv_positions);
  p.mutable_proposer_kv_blocks()->Add(h.proposer.kv_blocks.begin(), h.proposer.kv_blocks.end());
  p.set_proposer_feature_rows(std::string(reinterpret_cast<const char*>(h.proposer.feature_rows.data()),
                                          h.proposer.feature_rows.size() * sizeof(float)));
  p.set_proposer_feature_width(h.proposer.feature_width);
  return p;
}

absl::StatusOr<HandoffRecord> handoff_from_proto(const node::v1::HandoffRecord& p) {
  HandoffRecord h;
  h.request_id = p.request_id();
  h.prompt.assign(p.prompt().begin(), p.prompt().end());
  h.params = sampling_from_proto(p.sampling());
  h.seed = p.seed();
  h.cache_salt = p.cache_salt();
  h.state_group = p.state_group();
  h.state_slot = p.state_slot();
  h.first_token = p.first_token();
  h.first_logprob = p.first_logprob();
  for (const v1::TopLogprob& t : p.first_top_logprobs()) h.first_top_logprobs.push_back({t.token(), t.logprob()});
  h.num_cached_prompt_tokens = p.num_cached_prompt_tokens();
  h.kv_blocks.assign(p.kv_blocks().begin(), p.kv_blocks().end());
  h.proposer.kv_positions = p.proposer_kv_positions();
  h.proposer.kv_blocks.assign(p.proposer_kv_blocks().begin(), p.proposer_kv_blocks().end());
  const std::string& rows = p.proposer_feature_rows();
  if (rows.size() % sizeof(float) != 0) {
    return absl::InvalidArgumentError(str_cat("hand-off record of '", p.request_id(), "': proposer_feature_rows has ",
                                              rows.size(), " bytes, not a whole number of f32 values"));
  }
  h.proposer.feature_rows.resize(rows.size() / sizeof(float));
  if (!rows.empty()) std::memcpy(h.proposer.feature_rows.data(), rows.data(), rows.size());
  h.proposer.feature_width = p.proposer_feature_width();
  if (h.proposer.feature_width < 0 ||
      (h.proposer.feature_width > 0 && h.proposer.feature_rows.size() % static_cast<std::size_t>(h.proposer.feature_width) != 0)) {
    return absl::InvalidArgumentError(str_cat("hand-off record of '", p.request_id(), "': ", h.proposer.feature_rows.size(),
                                              " feature values are not rows of width ", h.proposer.feature_width));
  }
  return h;
}

}  // namespace baton
