// Conversions between the wire messages (proto/baton/v1) and the engine's types: sampling
// parameters, finish reasons, token logprobs and the hand-off record. Pure functions; the
// engine's own validation runs where the values are used (add_request, commit).
//
// Must not: validate beyond what a conversion needs (the engine names bad fields), or hold state.
#pragma once

#include "absl/status/statusor.h"
#include "baton/v1/api.pb.h"
#include "baton/v1/node.pb.h"
#include "engine/engine.h"
#include "engine/handoff.h"

namespace baton {

// Unset fields take vLLM's defaults (temperature 1, max_tokens 16, ...).
SamplingParams sampling_from_proto(const v1::SamplingParams& p);
v1::SamplingParams sampling_to_proto(const SamplingParams& p);

v1::FinishReason finish_reason_to_proto(FinishReason r);
FinishReason finish_reason_from_proto(v1::FinishReason r);

v1::TokenLogprob token_logprob_to_proto(const TokenOutput& t);

node::v1::HandoffRecord handoff_to_proto(const HandoffRecord& h);
// InvalidArgument naming the field when the feature rows are not whole f32 rows.
absl::StatusOr<HandoffRecord> handoff_from_proto(const node::v1::HandoffRecord& p);

}  // namespace baton
