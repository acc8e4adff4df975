// Proposer: the interface every speculative proposer implements (n-gram, suffix, draft model,
// EAGLE-1/3, MTP). It keeps per-request state — created by add_request, extended as accepted
// tokens arrive (each propose() call sees the request's whole token sequence, which only grows
// between calls: rejected drafts never enter it), and dropped by remove_request — and proposes for
// a batch of running requests at once, a variable number of drafts per request.
//
// Proposers with their own KV (a draft model, EAGLE/MTP heads) also take part in prefill/decode
// hand-off: a prefill engine exports the state its proposer computed for a prompt, a decode
// engine reserves room for it before any byte moves and imports it on commit (ProposerHandoff).
//
// Proposers must not change anything the target model or its KV cache owns; model-based ones keep
// their own KV and consume the target's hidden states through TargetStateConsumer
// (model_proposer.h). A failure that concerns one request is reported in that request's `status`
// so the engine can finish it alone; propose()'s own status is for failures of the whole call.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv/block_pool.h"
#include "engine/kv/layout_fingerprint.h"
#include "engine/sample/random.h"
#include "engine/sample/sampler.h"
#include "engine/sample/sampling_params.h"

namespace baton {

class KvCache;
using RequestKey = std::uint64_t;

struct ProposalRequest {
  RequestKey key = 0;
  std::span<const std::int32_t> tokens;  // prompt + output so far; the last one is the newest token
  std::int32_t prompt_len = 0;
  std::int32_t max_drafts = 0;            // at most k, less near max_tokens / max_model_len
  std::vector<std::int32_t>* drafts = nullptr;  // out: 0..max_drafts proposed tokens
  // out, only for probabilistic drafts: drafts->size() rows of vocab probabilities q (row i is the
  // distribution drafts[i] was sampled from). Empty for one-hot (deterministic) drafts.
  std::vector<float>* draft_probs = nullptr;
  // The request's sampling parameters and the stream its sampled drafts are drawn from
  // (RandomStream(seed, kDraft, position of drafts[0])), for proposers that sample their drafts
  // (draft_sample_method = probabilistic); deterministic proposers ignore them.
  const SamplingParams* sampling = nullptr;
  RandomStream* draft_rng = nullptr;
  absl::Status status;  // out: an error of this request alone (it gets no drafts)
};

// The proposer's state for one prompt, handed from a prefill engine to a decode engine. Feature
// rows are the target states of positions [kv_positions, kv_positions + rows) — what a head has
// not consumed yet; the draft-side KV of positions [0, kv_positions) lives in kv_blocks of the
// proposer's KV pool (the bytes travel through the transport; the ids say where).
struct ProposerHandoff {
  std::int32_t kv_positions = 0;
  std::vector<BlockId> kv_blocks;
  std::vector<float> feature_rows;  // [rows, feature width] f32
  std::int32_t feature_width = 0;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual std::string_view name() const = 0;
  // True when drafts come with their probabilities q (probabilistic draft sampling).
  virtual bool has_draft_probs() const { return false; }

  // num_speculative_tokens when the config leaves it unset (MTP: one per module); nullopt when
  // the method requires it.
  virtual std::optional<std::int32_t> default_num_speculative_tokens() const { return std::nullopt; }
  // The KV pool's identity for the layout fingerprint (proposers with their own KV).
  virtual std::optional<KvPoolFingerprint> kv_fingerprint() const { return std::nullopt; }

  virtual void add_request(RequestKey key, std::span<const std::int32_t> prompt) = 0;
  // The request's id, right after add_request (for proposers that name things after requests).
  virtual void label_request(RequestKey /*key*/, std::string_view /*request_id*/) {}
  // `finished`: the request completed normally, so its output may stay in a global cache (suffix
  // decoding learns responses as they are generated and keeps finished ones); false for aborts
  // and faults, whose partial output is dropped.
  virtual void remove_request(RequestKey key, bool finished) = 0;
  // The target dropped this request's KV and will recompute it (preemption): forget whatever was
  // computed from target positions (and free its KV), keep the request.
  virtual void reset_request(RequestKey /*key*/) {}
  virtual absl::Status propose(std::span<ProposalRequest> batch) = 0;
  // A file this proposer wrote for the request (extract_hidden_states: its hidden states), once it
  // is complete; empty otherwise. The engine reports it in the request's output.
  virtual std::string output_file(RequestKey /*key*/) const { return {}; }

  // ---- prefill/decode hand-off (proposers without KV or target states keep the defaults) ------
  // Draft-side KV positions a decode engine must receive for a prompt of prompt_len tokens.
  virtual std::int32_t handoff_kv_positions(std::int32_t /*prompt_len*/) const { return 0; }
  // Decode side, before the bytes move: creates the request's state holding pool blocks for
  // handoff_kv_positions(prompt_len) positions (released by remove_request if never committed).
  virtual absl::StatusOr<std::vector<BlockId>> reserve_state(RequestKey /*key*/, std::int32_t /*prompt_len*/) {
    return std::vector<BlockId>{};
  }
  // Prefill side, after this engine proposed for the request (prompt + first token): its state.
  virtual absl::StatusOr<ProposerHandoff> export_state(RequestKey /*key*/) const { return ProposerHandoff{}; }
  // Decode side, on commit: the exported state, its KV already copied into the reserved blocks;
  // `tokens` is prompt + first token.
  virtual absl::Status import_state(RequestKey /*key*/, const ProposerHandoff& /*state*/,
                                    std::span<const std::int32_t> /*tokens*/) {
    return absl::OkStatus();
  }
  // The proposer's own KV memory (a transport registers it) and block bookkeeping (for usage
  // gauges); nullptr when it has none.
  virtual KvCache* kv_cache() { return nullptr; }
  virtual const KvBlockPool* kv_pool() const { return nullptr; }
};

}  // namespace baton
