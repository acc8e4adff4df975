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

std::int32_t argmax(std::span<const float> row) {
  return static_cast<std::int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
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
  BATON_RETURN_IF_ERROR(check_same_vocabulary(ctx.target_dir, *ctx.target_config, config.model, draft_config));
  BATON_ASSIGN_OR_RETURN(auto checkpoint, Checkpoint::open(config.model));
  WeightLoadOptions wo;
  wo.dtype = ctx.dtype;
  BATON_ASSIGN_OR_RETURN(ModelWeights weights, ModelWeights::load(draft_config, checkpoint, *ctx.backend, wo));

  std::unique_ptr<DraftModelProposer> p(new DraftModelProposer());
  p->k_ = config.num_speculative_tokens;
  p->budget_ = ctx.max_num_batched_tokens;
  p->block_size_ = ctx.block_size;
  p->probabilistic_ = config.draft_sample_method == DraftSampleMethod::kProbabilistic;
  p->eos_ = ctx.target_config->eos_token_ids;
  TransformerOptions to;
  to.max_num_tokens = ctx.max_num_batched_tokens;
  to.max_num_seqs = ctx.max_num_seqs;
  to.max_num_logits = ctx.max_num_seqs;
  to.max_model_len = ctx.max_model_len;
  to.block_size = ctx.block_size;
  BATON_ASSIGN_OR_RETURN(p->model_, Transformer::create(*ctx.backend, draft_config, std::move(weights), to));
  // As many token slots as the target's cache, plus room for every sequence's drafts.
  const KvCacheLayout target_layout{ctx.target_config->num_layers, ctx.target_config->num_kv_heads,
                                    ctx.target_config->head_dim, ctx.block_size, ctx.backend->activation_dtype()};
  const std::int32_t blocks = KvCache::blocks_for_budget(target_layout, ctx.kv_cache_bytes) +
                              ctx.max_num_seqs * BlockTable::blocks_for(p->k_ + 1, ctx.block_size);
  BATON_ASSIGN_OR_RETURN(KvCache cache, KvCache::create(*ctx.backend, p->model_->kv_layout(), blocks));
  p->cache_ = std::make_unique<KvCache>(std::move(cache));
  p->pool_ = std::make_unique<KvBlockPool>(blocks, ctx.block_size);
  spdlog::info("draft model {}: {} layers, hidden {}, {} KV blocks", config.model, draft_config.num_layers,
               draft_config.hidden_size, blocks);
  return p;
}

void DraftModelProposer::add_request(RequestKey key, std::span<const std::int32_t> /*prompt*/) {
  states_.try_emplace(key, block_size_);
}

void DraftModelProposer::remove_request(RequestKey key, bool /*finished*/) {
  auto it = states_.find(key);
  if (it == states_.end()) return;
  it->second.table.release_all(*pool_);
  states_.erase(it);
}

void DraftModelProposer::sync(State& s, std::span<const std::int32_t> tokens) {
  std::size_t common = 0;
  while (common < s.fed.size() && common < tokens.size() && s.fed[common] == tokens[common]) ++common;
  // The newest token is always fed again: its logits give the first draft.
  if (!tokens.empty()) common = std::min(common, tokens.size() - 1);
  s.fed.resize(common);
  s.table.shrink_to(*pool_, static_cast<std::int32_t>(common));
}

std::int32_t DraftModelProposer::pick(std::span<const float> logits, ProposalRequest& p) {
  if (!probabilistic_) return argmax(logits);
  // Sampled drafts use the request's own processing (REFERENCE §2: the same processing defines q)
  // and its own random stream; q is kept for the rejection sampler.
  const auto v = logits.size();
  const auto output = p.tokens.subspan(static_cast<std::size_t>(p.prompt_len));
  history_.assign(output.begin(), output.end());
  history_.insert(history_.end(), p.drafts->begin(), p.drafts->end());
  probs_.resize(v);
  sampler_.target_probs(logits, *p.sampling, TokenHistory{p.tokens.first(static_cast<std::size_t>(p.prompt_len)), history_},
                        eos_, probs_);
  p.draft_probs->insert(p.draft_probs->end(), probs_.begin(), probs_.end());
  return Sampler::draw(probs_, *p.rng);
}

absl::Status DraftModelProposer::propose(std::span<ProposalRequest> batch) {
  struct Work {
    ProposalRequest* p;
    State* s;
    bool ok = true;
  };
  std::vector<Work> work;
  for (ProposalRequest& p : batch) {
    auto it = states_.find(p.key);
    if (it == states_.end() || p.max_drafts <= 0 || p.tokens.empty()) continue;
    sync(it->second, p.tokens);
    work.push_back({&p, &it->second});
  }
  const auto vocab = static_cast<std::size_t>(model_->config().vocab_size);
  const std::size_t max_seqs = static_cast<std::size_t>(model_->options().max_num_seqs);

  // Runs one draft forward over `seqs` (each paired with its work item) and picks a draft for
  // every sequence that asked for logits.
  auto run = [&](std::vector<ForwardSequence>& seqs, std::vector<Work*>& owners) -> absl::Status {
    if (seqs.empty()) return absl::OkStatus();
    ForwardBatch fb;
    fb.sequences = seqs;
    BATON_ASSIGN_OR_RETURN(ForwardOutput out, model_->forward(fb, *cache_));
    host_logits_.resize(static_cast<std::size_t>(out.logits.numel()));
    model_->backend().copy_to_host(host_logits_.data(), out.logits.data, host_logits_.size() * sizeof(float));
    std::size_t row = 0;
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      if (seqs[i].logits_indices.empty()) continue;
      owners[i]->p->drafts->push_back(pick(std::span<const float>(host_logits_).subspan(row * vocab, vocab), *owners[i]->p));
      ++row;
    }
    seqs.clear();
    owners.clear();
    return absl::OkStatus();
  };

  static constexpr std::int32_t kLast[1] = {0};
  std::vector<ForwardSequence> seqs;
  std::vector<Work*> owners;
  std::vector<std::int32_t> last_index;  // storage for logits indices, one per sequence
  last_index.reserve(work.size());

  // Catch-up: feed every accepted token the draft has not seen, in forwards of at most the token
  // budget; the chunk ending at a request's newest token yields its first draft.
  for (bool pending = true; pending;) {
    pending = false;
    std::int32_t budget = budget_;
    last_index.clear();
    for (Work& w : work) {
      const auto fed = static_cast<std::int32_t>(w.s->fed.size());
      const auto n = static_cast<std::int32_t>(w.p->tokens.size());
      if (!w.ok || fed >= n) continue;
      if (budget == 0 || seqs.size() == max_seqs) {
        pending = true;
        continue;
      }
      const std::int32_t m = std::min(n - fed, budget);
      if (!w.s->table.grow_to(*pool_, fed + m)) {
        w.ok = false;  // out of draft KV: no drafts for this request this step
        continue;
      }
      ForwardSequence s;
      s.tokens = w.p->tokens.subspan(static_cast<std::size_t>(fed), static_cast<std::size_t>(m));
      s.start_position = fed;
      s.block_table = w.s->table.blocks();
      last_index.push_back(m - 1);
      if (fed + m == n) s.logits_indices = std::span<const std::int32_t>(&last_index.back(), 1);
      seqs.push_back(s);
      owners.push_back(&w);
      w.s->fed.insert(w.s->fed.end(), s.tokens.begin(), s.tokens.end());
      budget -= m;
      if (fed + m < n) pending = true;
    }
    BATON_RETURN_IF_ERROR(run(seqs, owners));
  }

  // Autoregressive steps: feed each request's latest draft until it has max_drafts of them.
  for (std::int32_t step = 1; step < k_; ++step) {
    for (Work& w : work) {
      if (!w.ok || static_cast<std::int32_t>(w.p->drafts->size()) != step || step >= w.p->max_drafts) continue;
      if (seqs.size() == max_seqs) break;  // the rest keep fewer drafts
      const auto pos = static_cast<std::int32_t>(w.s->fed.size());
      if (!w.s->table.grow_to(*pool_, pos + 1)) {
        w.ok = false;
        continue;
      }
      w.s->fed.push_back(w.p->drafts->back());
      ForwardSequence s;
      s.tokens = std::span<const std::int32_t>(&w.s->fed.back(), 1);
      s.start_position = pos;
      s.block_table = w.s->table.blocks();
      s.logits_indices = std::span<const std::int32_t>(kLast, 1);
      seqs.push_back(s);
      owners.push_back(&w);
    }
    BATON_RETURN_IF_ERROR(run(seqs, owners));
  }
  for (Work& w : work) {
    if (static_cast<std::int32_t>(w.p->drafts->size()) > w.p->max_drafts) {
      w.p->drafts->resize(static_cast<std::size_t>(w.p->max_drafts));
      if (probabilistic_) w.p->draft_probs->resize(static_cast<std::size_t>(w.p->max_drafts) * vocab);
    }
  }
  return absl::OkStatus();
}

}  // namespace baton
