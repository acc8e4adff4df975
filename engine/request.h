// Request: one generation request's state inside the engine — its tokens (prompt, then output),
// how many have KV in the cache, its blocks, its random stream and its finish state.
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
#include "engine/sample/sampler.h"
#include "engine/sample/sampling_params.h"
#include "engine/sample/stop_checker.h"

namespace baton {

enum class RequestState { kWaiting, kRunning, kFinished };

struct Request {
  Request(std::uint64_t key_, std::string id_, std::vector<std::int32_t> prompt, SamplingParams params_,
          std::uint64_t seed, std::int32_t block_size)
      : key(key_),
        id(std::move(id_)),
        params(std::move(params_)),
        tokens(std::move(prompt)),
        prompt_len(static_cast<std::int32_t>(tokens.size())),
        blocks(block_size),
        rng(seed),
        arrival(std::chrono::steady_clock::now()) {}

  std::uint64_t key;  // engine-unique number, for proposers' per-request state
  std::string id;
  SamplingParams params;
  std::vector<std::int32_t> tokens;  // prompt followed by output
  std::int32_t prompt_len;
  std::int32_t num_computed = 0;     // leading tokens whose KV is in the cache
  std::int32_t num_cached_prompt = 0;  // prompt tokens served by the prefix cache at admission
  BlockTable blocks;
  RequestRng rng;
  RequestState state = RequestState::kWaiting;
  FinishReason finish_reason = FinishReason::kNone;
  std::unique_ptr<TextDecoder> decoder;  // only when the engine has a tokenizer
  std::unique_ptr<StopChecker> stop_checker;
  std::size_t text_sent = 0;             // bytes of visible text already reported
  std::int32_t num_preemptions = 0;
  // Speculative decoding: drafts proposed for the next step (verified together with the pending
  // token) and, for probabilistic drafts, their distributions q ([drafts.size(), vocab]).
  std::vector<std::int32_t> drafts;
  std::vector<float> draft_probs;
  std::chrono::steady_clock::time_point arrival;
  std::chrono::steady_clock::time_point first_token_time{};

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
