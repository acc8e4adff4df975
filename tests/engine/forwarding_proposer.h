// A Proposer that forwards everything to a real one (also its target-state needs), for tests that
// inject a fault into one call by overriding it (EngineHooks::wrap_proposer).
#pragma once

#include <memory>

#include "engine/spec/model_proposer.h"
#include "engine/spec/proposer.h"

namespace baton::testing {

class ForwardingProposer : public Proposer, public TargetStateConsumer {
 public:
  explicit ForwardingProposer(std::unique_ptr<Proposer> real) : real_(std::move(real)) {}

  std::string_view name() const override { return real_->name(); }
  bool has_draft_probs() const override { return real_->has_draft_probs(); }
  std::optional<std::int32_t> default_num_speculative_tokens() const override {
    return real_->default_num_speculative_tokens();
  }
  std::optional<KvPoolFingerprint> kv_fingerprint() const override { return real_->kv_fingerprint(); }
  void add_request(RequestKey key, std::span<const std::int32_t> prompt) override { real_->add_request(key, prompt); }
  void remove_request(RequestKey key, bool finished) override { real_->remove_request(key, finished); }
  void reset_request(RequestKey key) override { real_->reset_request(key); }
  absl::Status propose(std::span<ProposalRequest> batch) override { return real_->propose(batch); }
  std::int32_t handoff_kv_positions(std::int32_t prompt_len) const override {
    return real_->handoff_kv_positions(prompt_len);
  }
  absl::StatusOr<std::vector<BlockId>> reserve_state(RequestKey key, std::int32_t prompt_len) override {
    return real_->reserve_state(key, prompt_len);
  }
  absl::StatusOr<ProposerHandoff> export_state(RequestKey key) const override { return real_->export_state(key); }
  absl::Status import_state(RequestKey key, const ProposerHandoff& state, std::span<const std::int32_t> tokens) override {
    return real_->import_state(key, state, tokens);
  }
  KvCache* kv_cache() override { return real_->kv_cache(); }
  const KvBlockPool* kv_pool() const override { return real_->kv_pool(); }

  TargetStateSpec target_states() const override {
    const auto* c = dynamic_cast<const TargetStateConsumer*>(real_.get());
    return c != nullptr ? c->target_states() : TargetStateSpec{};
  }
  absl::Status observe(RequestKey key, std::int32_t start, const TargetStateRows& rows, std::int32_t n,
                       std::int32_t n_valid) override {
    auto* c = dynamic_cast<TargetStateConsumer*>(real_.get());
    return c != nullptr ? c->observe(key, start, rows, n, n_valid) : absl::OkStatus();
  }
  void before_target_forward() override {
    if (auto* c = dynamic_cast<TargetStateConsumer*>(real_.get())) c->before_target_forward();
  }
  bool enable_prefix_cache() override {
    auto* c = dynamic_cast<TargetStateConsumer*>(real_.get());
    return c != nullptr && c->enable_prefix_cache();
  }
  std::int32_t adopt_cached_prefix(RequestKey key, std::span<const std::int32_t> tokens, std::uint64_t salt,
                                   std::int32_t positions) override {
    auto* c = dynamic_cast<TargetStateConsumer*>(real_.get());
    return c != nullptr ? c->adopt_cached_prefix(key, tokens, salt, positions) : positions;
  }
  void release_cached_prefix(RequestKey key) override {
    if (auto* c = dynamic_cast<TargetStateConsumer*>(real_.get())) c->release_cached_prefix(key);
  }

 protected:
  Proposer& real() { return *real_; }

 private:
  std::unique_ptr<Proposer> real_;
};

}  // namespace baton::testing
