// Request: one generation request's state inside the engine — its tokens (prompt, then output),
// how many have KV in the cache, its blocks, its seed, its drafts, its finish state and times.
//
// Owned by the Engine; the Scheduler only reorders pointers to it. Not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/kv/block_table.h"
#include "engine/sample/sampling_params.h"
#include "engine/sample/stop_checker.h"
#include "engine/structured/output_constraint.h"

namespace baton {

using EngineClock = std::chrono::steady_clock;

enum class RequestState {
  kWaiting,    // queued; holds no KV
  kRunning,    // scheduled each step (prefill chunks, then decode / verification)
  kPrefilled,  // prefill role: first token sampled, KV kept under a lease for a decode engine
  kReserved,   // decode role: blocks reserved under a lease, waiting for the hand-off commit
  kFinished,
};

// One request's share of the speculative-decoding counters (SpecDecodeStats), for its usage report.
struct RequestSpecCounts {
  std::int64_t num_drafts = 0;  // verification steps that checked at least one draft token
  std::int64_t num_draft_tokens = 0;
  std::int64_t num_accepted_tokens = 0;
  std::vector<std::int64_t> accepted_per_position;  // [k]: accepted drafts at each position (0-based)
  // [k + 1]: this request's proposals by the draft length its step asked of it (k, or less when
  // adaptive_draft_length, disable_by_batch_size or its max_speculative_tokens lowered it).
  std::vector<std::int64_t> proposals_by_length;
  // A sampled verification of this request ran with entropy verification (lossy): its output is
  // not guaranteed to follow the target's distribution.
  bool lossy = false;
};

struct Request {
  Request(std::uint64_t key_, std::string id_, std::vector<std::int32_t> prompt, SamplingParams params_,
          std::uint64_t seed_, std::int32_t block_size, EngineClock::time_point now)
      : key(key_),
        id(std::move(id_)),
        params(std::move(params_)),
        tokens(std::move(prompt)),
        prompt_len(static_cast<std::int32_t>(tokens.size())),
        blocks(block_size),
        seed(seed_),
        arrival(now) {}

  std::uint64_t key;  // engine-unique number, for proposers' per-request state
  std::string id;
  SamplingParams params;
  std::vector<std::int32_t> tokens;  // prompt followed by output
  std::int32_t prompt_len;
  std::int32_t num_computed = 0;       // leading tokens whose KV is in the cache
  std::int32_t num_cached_prompt = 0;  // prompt tokens served by the prefix cache at admission
  BlockTable blocks;
  // Hybrid models: the request's recurrent state group (StateCache) while it runs, and the slot
  // holding the state after token num_computed - 1 (-1: none, at num_computed 0).
  std::int32_t state_group = -1;
  std::int32_t state_slot = -1;
  std::uint64_t seed;  // every random draw is keyed by it (random.h)
  RequestState state = RequestState::kWaiting;
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;  // finish_reason kError: what went wrong
  std::string hidden_states_path;  // extract_hidden_states: the file written for its prompt, once complete
  std::unique_ptr<TextDecoder> decoder;  // only when the engine has a tokenizer
  std::unique_ptr<StopChecker> stop_checker;
  // params.response_format's grammar over the output so far (nullptr: free text).
  std::unique_ptr<structured::OutputConstraint> constraint;
  std::size_t text_sent = 0;  // bytes of visible text already reported
  std::int32_t num_preemptions = 0;
  bool prefill_only = false;  // prefill role: stop after the first token and hand the KV off
  bool starved = false;       // the last step had no budget for its verification: goes first next
  // Speculative decoding: drafts proposed for the next step (verified together with the pending
  // token) and, for probabilistic drafts, their distributions q ([drafts.size(), vocab]).
  std::vector<std::int32_t> drafts;
  std::vector<float> draft_probs;
  bool needs_drafts = false;  // decoding, and the proposer has not seen its newest token yet
  RequestSpecCounts spec;
  EngineClock::time_point arrival;
  EngineClock::time_point first_token_time{};
  EngineClock::time_point finish_time{};
  EngineClock::time_point lease_deadline{};  // kPrefilled / kReserved
  std::vector<std::int32_t> proposer_blocks;  // kReserved: the proposer's KV blocks held for the hand-off
  std::uint64_t write_grant = 0;  // kReserved: the ticket of a sender allowed to write the blocks (0: none)

  std::int32_t num_tokens() const { return static_cast<std::int32_t>(tokens.size()); }
  std::int32_t num_output() const { return num_tokens() - prompt_len; }
  std::span<const std::int32_t> prompt() const { return {tokens.data(), static_cast<std::size_t>(prompt_len)}; }
  std::span<const std::int32_t> output() const {
    return std::span<const std::int32_t>(tokens).subspan(static_cast<std::size_t>(prompt_len));
  }
  bool finished() const { return state == RequestState::kFinished; }
  // All known tokens have KV except the newest one: the request is decoding.
  bool decoding() const { return num_computed == num_tokens() - 1 && num_output() > 0; }
};

}  // namespace baton
