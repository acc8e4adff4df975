#include "engine/spec/draft_model_proposer.h"

#include <algorithm>
#include <filesystem>

#include "common/status.h"
#include "common/text_file.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace baton {
namespace {

// The vocabulary part of a tokenizer.json: the model's vocab and the added tokens (id, content).
absl::StatusOr<nlohmann::json> vocabulary_of(const std::string& dir) {
  BATON_ASSIGN_OR_RETURN(const std::string text, read_text_file(dir + "/tokenizer.json"));
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError(str_cat(dir, "/tokenizer.json: not a JSON object"));
  nlohmann::json added = nlohmann::json::array();
  for (const auto& t : j.value("added_tokens", nlohmann::json::array())) {
    added.push_back({t.value("id", -1), t.value("content", std::string())});
  }
  return nlohmann::json{{"vocab", j.contains("model") ? j["model"].value("vocab", nlohmann::json()) : nlohmann::json()},
                        {"added", added}};
}

}  // namespace

absl::Status check_same_vocabulary(const std::string& target_dir, const ModelConfig& target,
                                   const std::string& draft_dir, const ModelConfig& draft) {
  if (target.vocab_size != draft.vocab_size) {
    return absl::InvalidArgumentError(str_cat("draft model ", draft_dir, " has vocab_size ", draft.vocab_size,
                                              " but the target ", target_dir, " has ", target.vocab_size,
                                              ": a draft model must share the target's tokenizer"));
  }
  namespace fs = std::filesystem;
  const bool target_tok = fs::exists(target_dir + "/tokenizer.json");
  const bool draft_tok = fs::exists(draft_dir + "/tokenizer.json");
  if (target_tok && draft_tok) {
    BATON_ASSIGN_OR_RETURN(const auto tv, vocabulary_of(target_dir));
    BATON_ASSIGN_OR_RETURN(const auto dv, vocabulary_of(draft_dir));
    if (tv != dv) {
      return absl::InvalidArgumentError(str_cat("draft model ", draft_dir, "/tokenizer.json has a different vocabulary from ",
                                                target_dir, "/tokenizer.json: a draft model must share the target's tokenizer"));
    }
  } else if (target_tok != draft_tok) {
    spdlog::warn("only one of {} and {} has tokenizer.json; trusting equal vocab_size ({})", target_dir, draft_dir,
                 target.vocab_size);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DraftModelProposer>> DraftModelProposer::create(const SpeculativeConfig& config,
                                                                              const ProposerContext& ctx) {
  BATON_ASSIGN_OR_RETURN(const ModelConfig draft_config, ModelConfig::load(config.model));
  if (draft_config.num_recurrent_layers() > 0) {
    return absl::UnimplementedError(str_cat("speculative_config `model` ", config.model, ": ",
                                            draft_config.architecture_name,
                                            " has linear-attention layers; a draft model cannot keep their recurrent "
                                            "state yet"));
  }
  BATON_RETURN_IF_ERROR(check_same_vocabulary(ctx.target_dir, *ctx.target_config, config.model, draft_config));
  BATON_ASSIGN_OR_RETURN(auto checkpoint, Checkpoint::open(config.model));
  WeightLoadOptions wo;
  wo.dtype = ctx.dtype;
  BATON_ASSIGN_OR_RETURN(ModelWeights weights, ModelWeights::load(draft_config, checkpoint, *ctx.backend, wo));

  std::unique_ptr<DraftModelProposer> p(new DraftModelProposer());
  BATON_RETURN_IF_ERROR(p->init_sampling(config, ctx));
  TransformerOptions to;
  to.max_num_tokens = ctx.max_num_batched_tokens;
  to.max_num_seqs = ctx.max_num_seqs;
  to.max_num_logits = ctx.max_num_seqs;
  to.max_model_len = ctx.max_model_len;
  to.block_size = ctx.block_size;
  to.graph_max_seqs = ctx.graph_max_seqs;
  // Drafting steps add one token per sequence; catch-ups up to k + 2 (the accepted drafts, the
  // correction or bonus token, the position recomputed from the last step), padded to the longest.
  to.graph_max_tokens_per_seq = config.num_speculative_tokens + 2;
  BATON_ASSIGN_OR_RETURN(p->model_, Transformer::create(*ctx.backend, draft_config, std::move(weights), to));
  BATON_RETURN_IF_ERROR(p->init_kv(*ctx.backend, p->model_->kv_layout(), ctx, config.num_speculative_tokens));
  spdlog::info("draft model {}: {} layers, hidden {}, {} KV blocks", config.model, draft_config.num_layers,
               draft_config.hidden_size, p->pool_->num_blocks());
  return p;
}

std::optional<KvPoolFingerprint> DraftModelProposer::kv_fingerprint() const {
  return KvPoolFingerprint{"draft", model_->config().architecture_name, model_->config().identity,
                           model_->weights().matrix_dtype(), cache_->layout()};
}

void DraftModelProposer::add_request(RequestKey key, std::span<const std::int32_t> prompt) {
  DraftingProposer::add_request(key, prompt);
  model_state(*state_of(key)).prompt_len = static_cast<std::int32_t>(prompt.size());
}

void DraftModelProposer::reset_request(RequestKey key) {
  const State* s = state_of(key);
  if (s == nullptr) return;
  const std::int32_t prompt_len = static_cast<const ModelState&>(*s).prompt_len;
  DraftingProposer::reset_request(key);
  model_state(*state_of(key)).prompt_len = prompt_len;
}

void DraftModelProposer::sync(ModelState& s, std::span<const std::int32_t> tokens) {
  std::size_t common = 0;
  const std::size_t fed = std::min(s.fed.size(), static_cast<std::size_t>(s.computed));
  while (common < fed && common < tokens.size() && s.fed[common] == tokens[common]) ++common;
  if (!tokens.empty()) common = std::min(common, tokens.size() - 1);
  s.fed.resize(common);
  s.computed = static_cast<std::int32_t>(common);
  s.table.shrink_to(*pool_, s.computed);
}

absl::Status DraftModelProposer::run(const ForwardBatch& batch, std::span<Work* const> owners) {
  BATON_ASSIGN_OR_RETURN(ForwardOutput out, model_->forward(batch, *cache_));
  if (!probabilistic_) {
    // Greedy drafts: only the argmax ids leave the device. A row without one ends that request's
    // drafting for this step.
    const std::span<const std::int32_t> ids = argmax_on_device(out.logits);
    for (std::size_t i = 0; i < owners.size(); ++i) {
      if (ids[i] >= 0) owners[i]->p->drafts->push_back(ids[i]);
    }
    return absl::OkStatus();
  }
  host_logits_.resize(static_cast<std::size_t>(out.logits.numel()));
  model_->backend().copy_to_host(host_logits_.data(), out.logits.data, host_logits_.size() * sizeof(float));
  const auto vocab = static_cast<std::size_t>(model_->config().vocab_size);
  for (std::size_t i = 0; i < owners.size(); ++i) {
    ProposalRequest& p = *owners[i]->p;
    const std::int32_t t = pick(std::span<const float>(host_logits_).subspan(i * vocab, vocab), p);
    if (t >= 0) p.drafts->push_back(t);
  }
  return absl::OkStatus();
}

absl::Status DraftModelProposer::propose(std::span<ProposalRequest> batch) {
  std::vector<Work> work;
  work.reserve(batch.size());
  for (ProposalRequest& p : batch) {
    State* s = state_of(p.key);
    if (s == nullptr) {
      p.status = absl::FailedPreconditionError(str_cat("draft_model proposer: request key ", p.key, " was never added"));
      continue;
    }
    if (p.max_drafts <= 0 || p.tokens.empty()) continue;
    sync(model_state(*s), p.tokens);
    work.push_back(Work{&p, s, true});
  }
  // Catch-up: every accepted token the draft has not seen; the chunk ending at a request's newest
  // token yields its first draft.
  std::vector<CatchUp> items;
  for (Work& w : work) {
    const auto computed = static_cast<std::size_t>(w.s->computed);
    items.push_back(CatchUp{&w, w.s->computed, w.p->tokens.subspan(computed)});
  }
  BATON_RETURN_IF_ERROR(run_catch_ups(items, [&](const ForwardBatch& b, std::span<const CatchUpSlice>, std::span<Work* const> owners) {
    return run(b, owners);
  }));
  for (Work& w : work) {
    ModelState& s = model_state(*w.s);
    s.fed.assign(w.p->tokens.begin(), w.p->tokens.begin() + s.computed);
  }
  // Autoregressive steps: feed each request's latest draft until it has max_drafts of them.
  static constexpr std::int32_t kLast[1] = {0};
  for (std::int32_t step = 1; step < k_; ++step) {
    ForwardBatch b;
    std::vector<Work*> owners;
    for (Work& w : work) {
      if (!w.ok || static_cast<std::int32_t>(w.p->drafts->size()) != step || step >= w.p->max_drafts) continue;
      ModelState& s = model_state(*w.s);
      const std::int32_t pos = s.computed;
      if (!reserve_positions(w, pos + 1)) continue;
      s.fed.push_back(w.p->drafts->back());
      s.computed = pos + 1;
      ForwardSequence seq;
      seq.tokens = std::span<const std::int32_t>(&s.fed.back(), 1);
      seq.start_position = pos;
      seq.block_table = s.table.blocks();
      seq.logits_indices = std::span<const std::int32_t>(kLast, 1);
      b.sequences.push_back(seq);
      owners.push_back(&w);
    }
    if (b.sequences.empty()) break;
    BATON_RETURN_IF_ERROR(run(b, owners));
  }
  return absl::OkStatus();
}

absl::StatusOr<ProposerHandoff> DraftModelProposer::export_state(RequestKey key) const {
  const State* s = state_of(key);
  if (s == nullptr) return absl::NotFoundError(str_cat("draft_model proposer: no state for request key ", key));
  const auto& ms = static_cast<const ModelState&>(*s);
  ProposerHandoff h;
  h.kv_positions = std::min(ms.computed, ms.prompt_len);
  h.kv_blocks = blocks_for_positions(*s, h.kv_positions);
  return h;
}

absl::Status DraftModelProposer::import_state(RequestKey key, const ProposerHandoff& h,
                                              std::span<const std::int32_t> tokens) {
  State* s = nullptr;
  BATON_RETURN_IF_ERROR(adopt_handoff_kv(key, h, &s));
  if (h.kv_positions > static_cast<std::int32_t>(tokens.size())) {
    return absl::InvalidArgumentError(str_cat("draft_model hand-off: KV for ", h.kv_positions, " positions but only ",
                                              tokens.size(), " tokens"));
  }
  ModelState& ms = model_state(*s);
  ms.fed.assign(tokens.begin(), tokens.begin() + h.kv_positions);
  return absl::OkStatus();
}

}  // namespace baton
