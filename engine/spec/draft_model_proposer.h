// DraftModelProposer: speculative drafts from a second, smaller Hugging Face model with the same
// tokenizer. It keeps its own paged KV cache, catches up on each request's accepted tokens, then
// runs k autoregressive steps for all requests in one batch per step. Drafts are the draft model's
// argmax (greedy, one-hot), or sampled from its processed distribution with q recorded
// (draft_sample_method = probabilistic).
//
// It never touches the target's KV. When its own cache runs out it simply proposes nothing for
// the requests it cannot fit (speculation degrades, output stays exact).
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv/block_pool.h"
#include "engine/kv/block_table.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/transformer.h"
#include "engine/spec/proposer.h"
#include "engine/spec/proposer_factory.h"

namespace baton {

class DraftModelProposer final : public Proposer {
 public:
  static absl::StatusOr<std::unique_ptr<DraftModelProposer>> create(const SpeculativeConfig& config,
                                                                    const ProposerContext& context);

  std::string_view name() const override { return "draft_model"; }
  bool has_draft_probs() const override { return probabilistic_; }
  void add_request(RequestKey key, std::span<const std::int32_t> prompt) override;
  void remove_request(RequestKey key, bool finished) override;
  absl::Status propose(std::span<ProposalRequest> batch) override;

 private:
  struct State {
    explicit State(std::int32_t block_size) : table(block_size) {}
    BlockTable table;
    std::vector<std::int32_t> fed;  // tokens whose draft KV is computed, in position order
  };

  DraftModelProposer() = default;
  // Rolls the draft KV back to the longest prefix of `tokens` it has computed.
  void sync(State& s, std::span<const std::int32_t> tokens);
  // Picks the draft token from one row of draft logits.
  std::int32_t pick(std::span<const float> logits, ProposalRequest& p);

  std::unique_ptr<Transformer> model_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<KvBlockPool> pool_;
  std::unordered_map<RequestKey, State> states_;
  std::int32_t k_ = 0;
  std::int32_t budget_ = 0;
  std::int32_t block_size_ = 16;
  bool probabilistic_ = false;
  Sampler sampler_;
  std::vector<std::int32_t> eos_;
  std::vector<float> host_logits_, probs_;
  std::vector<std::int32_t> history_;
};

// Checks that the draft model speaks the target's vocabulary (same vocab_size and, when both have
// tokenizer.json, the same vocabulary and added tokens); the error names both directories.
absl::Status check_same_vocabulary(const std::string& target_dir, const ModelConfig& target,
                                   const std::string& draft_dir, const ModelConfig& draft);

}  // namespace baton
