// The records of a prefill/decode hand-off between two engines (docs/architecture.md, "Life of a
// disaggregated request"):
//   decode engine  reserve(id, prompt_len)  -> KvReservation: where the KV must land
//   prefill engine add_request(prefill_only) and step() -> HandoffRecord: what was computed
//   (a transport copies the blocks named in the record into the blocks named in the reservation)
//   decode engine  commit(id, record)       -> the request continues decoding
// A request prefilled by one engine and committed into another yields exactly the tokens one
// colocated engine yields: the record carries everything its tokens depend on (prompt, sampling
// parameters and seed — draws are keyed by it, random.h — the first token, the proposer's state
// and a hybrid model's recurrent state), and the KV itself is bit-identical (batch-invariant kernels, same layout fingerprint).
//
// Plain data: no engine pointers, so node services can serialize it. Must not carry text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/kv/block_pool.h"
#include "engine/request.h"
#include "engine/sample/sampler.h"
#include "engine/sample/sampling_params.h"
#include "engine/spec/proposer.h"

namespace baton {

// Decode side: blocks held for one incoming request until commit, release or the deadline.
struct KvReservation {
  std::string request_id;
  std::int32_t prompt_len = 0;
  std::vector<BlockId> kv_blocks;        // target pool, positions [0, prompt_len)
  std::vector<BlockId> proposer_blocks;  // the proposer's pool ("draft"), if it has one
  std::int32_t proposer_kv_positions = 0;
  // Hybrid models: the recurrent state group the state lands in (StateCache), in the slot the
  // record names.
  std::int32_t state_group = -1;
  EngineClock::time_point deadline{};
};

// Prefill side: what the decode engine needs to continue the request.
struct HandoffRecord {
  std::string request_id;
  std::vector<std::int32_t> prompt;
  SamplingParams params;  // as the request gave them
  std::uint64_t seed = 0;  // the seed in effect (the request's, or the one the engine drew)
  std::uint64_t cache_salt = 0;  // the request's prefix-cache salt (AddRequestOptions::cache_salt)
  std::int32_t first_token = 0;
  float first_logprob = 0.0f;                // raw logprob of first_token (when logprobs >= 0)
  std::vector<TokenLogprob> first_top_logprobs;
  // Prefix-cache hits on the prefill engine (a multiple of the block size): the KV of blocks
  // [0, num_cached_prompt_tokens / block_size) was not written by this request's forward, so a
  // transport that streams layers from the per-layer callback must send those blocks itself.
  std::int32_t num_cached_prompt_tokens = 0;
  std::vector<BlockId> kv_blocks;             // target pool blocks on the prefill engine, positions [0, prompt_len)
  ProposerHandoff proposer;                   // the proposer's state (its KV blocks are in its pool)
  // Hybrid models: where the recurrent state after the prompt is on the prefill engine — slot
  // state_slot of group state_group, every recurrent layer. A transport copies it into the same
  // slot of the reservation's group (both engines run the same k, so the slots agree).
  std::int32_t state_group = -1;
  std::int32_t state_slot = -1;
};

}  // namespace baton
