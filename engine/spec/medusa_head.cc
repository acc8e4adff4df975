#include "engine/spec/medusa_head.h"

#include <cmath>
#include <utility>

#include "common/status.h"
#include "common/text_file.h"
#include "engine/model/weight_loader.h"
#include "nlohmann/json.hpp"

namespace baton {
namespace {

using nlohmann::json;

// Bounds on a config's counts: far above any published Medusa (5 heads of 1 layer), low enough
// that a malformed config cannot ask for an absurd number of tensors.
constexpr std::int64_t kMaxHeads = 64;
constexpr std::int64_t kMaxLayers = 64;

struct MedusaShape {
  std::int64_t hidden = 0, vocab = 0, heads = 0, layers = 1, truncated = 0;
  bool bias = false, shared_lm_head = false;
  double logit_scale = 1.0;
};

absl::Status bad(const std::string& where, const std::string& what) {
  return absl::InvalidArgumentError(str_cat(where, ": ", what));
}

absl::StatusOr<std::int64_t> int_key(const json& cfg, const std::string& key, std::int64_t lo, std::int64_t hi,
                                     const std::string& where) {
  const json& v = cfg.at(key);
  if (!v.is_number_integer() || v.get<std::int64_t>() < lo || v.get<std::int64_t>() > hi) {
    return bad(where, str_cat("`", key, "` must be an integer in [", lo, ", ", hi, "], got ", v.dump()));
  }
  return v.get<std::int64_t>();
}

absl::StatusOr<bool> bool_key(const json& cfg, const std::string& key, const std::string& where) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return false;
  if (!it->is_boolean()) return bad(where, str_cat("`", key, "` must be true or false, got ", it->dump()));
  return it->get<bool>();
}

// vLLM's MedusaConfig reading: a key holding "num" and "heads" is the head count, "num" and
// "layers" the layers per head (medusa_num_heads, num_heads, ...).
absl::StatusOr<MedusaShape> shape_of(const json& cfg, const ModelConfig& target, const std::string& where) {
  MedusaShape s;
  std::string heads_key, layers_key;
  for (const auto& [key, value] : cfg.items()) {
    if (key.find("num") == std::string::npos) continue;
    std::string* slot = key.find("heads") != std::string::npos    ? &heads_key
                        : key.find("layers") != std::string::npos ? &layers_key
                                                                  : nullptr;
    if (slot == nullptr) continue;
    if (!slot->empty()) return bad(where, str_cat("both `", *slot, "` and `", key, "` give the same count"));
    *slot = key;
  }
  // Without a head count, vLLM's MedusaConfig default: 5 heads.
  s.heads = 5;
  if (!heads_key.empty()) {
    BATON_ASSIGN_OR_RETURN(s.heads, int_key(cfg, heads_key, 1, kMaxHeads, where));
  }
  if (!layers_key.empty()) {
    BATON_ASSIGN_OR_RETURN(s.layers, int_key(cfg, layers_key, 0, kMaxLayers, where));
  }
  for (const char* key : {"hidden_size", "vocab_size"}) {
    if (!cfg.contains(key)) return bad(where, str_cat("`", key, "` is missing"));
  }
  BATON_ASSIGN_OR_RETURN(s.hidden, int_key(cfg, "hidden_size", 1, 1 << 20, where));
  BATON_ASSIGN_OR_RETURN(s.vocab, int_key(cfg, "vocab_size", 1, 1 << 24, where));
  if (s.hidden != target.hidden_size) {
    return bad(where, str_cat("hidden_size ", s.hidden, " but the target's is ", target.hidden_size,
                              " (Medusa heads read the target's hidden states)"));
  }
  if (s.vocab != target.vocab_size) {
    return bad(where, str_cat("vocab_size ", s.vocab, " but the target's is ", target.vocab_size));
  }
  s.truncated = s.vocab;
  if (cfg.contains("truncated_vocab_size") && !cfg["truncated_vocab_size"].is_null()) {
    BATON_ASSIGN_OR_RETURN(s.truncated, int_key(cfg, "truncated_vocab_size", 1, s.vocab, where));
  }
  BATON_ASSIGN_OR_RETURN(s.bias, bool_key(cfg, "medusa_fc_bias", where));
  BATON_ASSIGN_OR_RETURN(s.shared_lm_head, bool_key(cfg, "original_lm_head", where));
  if (auto it = cfg.find("logit_scale"); it != cfg.end() && !it->is_null()) {
    if (!it->is_number() || !(it->get<double>() > 0.0) || !std::isfinite(it->get<double>())) {
      return bad(where, str_cat("`logit_scale` must be a finite number > 0, got ", it->dump()));
    }
    s.logit_scale = it->get<double>();
  }
  return s;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MedusaHead>> MedusaHead::load(const std::string& dir, const ModelConfig& target,
                                                            Backend& backend, std::int32_t max_rows,
                                                            std::optional<DType> dtype) {
  const std::string where = dir + "/config.json";
  BATON_ASSIGN_OR_RETURN(const json cfg, read_json_object_file(where));
  BATON_ASSIGN_OR_RETURN(const MedusaShape shape, shape_of(cfg, target, where));
  std::unique_ptr<MedusaHead> m(new MedusaHead(backend));
  BATON_ASSIGN_OR_RETURN(m->checkpoint_, Checkpoint::open(dir));
  WeightLoadOptions wo;
  wo.dtype = dtype;
  WeightLoader load("medusa head", *m->checkpoint_, backend, wo, &m->owned_);
  const std::string prefix = load.has("medusa_heads.lm_heads.0.weight") || load.has("medusa_heads.lm_head.weight") ||
                                     load.has("medusa_heads.blocks.0.layers.0.weight")
                                 ? "medusa_heads."
                                 : "";
  const std::int64_t h = shape.hidden, v = shape.truncated;
  m->hidden_ = static_cast<std::int32_t>(h);
  m->num_layers_ = static_cast<std::int32_t>(shape.layers);
  m->out_vocab_ = static_cast<std::int32_t>(v);
  m->logit_scale_ = static_cast<float>(shape.logit_scale);
  m->max_rows_ = std::max(max_rows, 1);

  if (shape.truncated < shape.vocab) {
    BATON_ASSIGN_OR_RETURN(const auto map, load.int64_vector(prefix + "token_map", v, "[truncated_vocab_size] target ids"));
    for (std::size_t i = 0; i < map.size(); ++i) {
      if (map[i] < 0 || map[i] >= shape.vocab) {
        return absl::InvalidArgumentError(str_cat(dir, ": token_map maps index ", i, " to ", map[i],
                                                  ", outside the target vocabulary of ", shape.vocab));
      }
      m->token_map_.push_back(static_cast<std::int32_t>(map[i]));
    }
  }
  // An LM head over the whole vocabulary is cut to the token_map's rows (runs of consecutive ids
  // are copied together).
  const auto lm_head = [&](const std::string& name) -> absl::StatusOr<TensorView> {
    TensorView w;
    const TensorInfo* t = m->checkpoint_->find(name);
    if (!m->token_map_.empty() && t != nullptr && !t->shape.empty() && t->shape[0] == shape.vocab) {
      std::vector<WeightLoader::RowRange> ranges;
      for (std::size_t i = 0; i < m->token_map_.size(); ++i) {
        const std::int64_t id = m->token_map_[i];
        if (!ranges.empty() && ranges.back().end == id) {
          ++ranges.back().end;
        } else {
          ranges.push_back({name, shape.vocab, id, id + 1});
        }
      }
      BATON_ASSIGN_OR_RETURN(w, load.regrouped(ranges, h, "[vocab_size, hidden] (cut to token_map)"));
    } else {
      BATON_ASSIGN_OR_RETURN(w, load.matrix(name, v, h, "[truncated_vocab_size, hidden]"));
    }
    return load.for_linear(w);
  };
  TensorView shared;
  if (shape.shared_lm_head) {
    const std::string name = load.has(prefix + "lm_head.weight") ? prefix + "lm_head.weight" : prefix + "lm_heads.0.weight";
    BATON_ASSIGN_OR_RETURN(shared, lm_head(name));
  }
  for (std::int64_t i = 0; i < shape.heads; ++i) {
    Head head;
    for (std::int64_t l = 0; l < shape.layers; ++l) {
      const std::string p = str_cat(prefix, "blocks.", i, ".layers.", l, ".");
      BATON_ASSIGN_OR_RETURN(TensorView w, load.matrix(p + "weight", h, h, "[hidden, hidden]"));
      BATON_ASSIGN_OR_RETURN(w, load.for_linear(w));
      head.weights.push_back(w);
      TensorView b;
      if (shape.bias) {
        BATON_ASSIGN_OR_RETURN(b, load.vector_f32({{p + "bias", h}}, "[hidden]"));
      }
      head.biases.push_back(b);
    }
    if (shape.shared_lm_head) {
      head.lm_head = shared;
    } else {
      BATON_ASSIGN_OR_RETURN(head.lm_head, lm_head(str_cat(prefix, "lm_heads.", i, ".weight")));
    }
    m->heads_.push_back(std::move(head));
  }

  const auto rows = static_cast<std::size_t>(m->max_rows_);
  for (DeviceBuffer* b : {&m->features_, &m->x_, &m->y_}) {
    BATON_ASSIGN_OR_RETURN(*b, backend.allocate(rows * static_cast<std::size_t>(h) * sizeof(float)));
  }
  BATON_ASSIGN_OR_RETURN(m->logits_, backend.allocate(rows * static_cast<std::size_t>(v) * sizeof(float)));
  return m;
}

TensorView MedusaHead::feature_input(std::int64_t rows) const {
  BATON_CHECK(rows >= 0 && rows <= max_rows_, "medusa head: ", rows, " rows, room for ", max_rows_);
  return features_.view(DType::kF32, {rows, hidden_});
}

TensorView MedusaHead::forward(std::int32_t head, std::int64_t rows) {
  BATON_CHECK(head >= 0 && head < num_heads(), "medusa head ", head, " of ", num_heads());
  const Head& hd = heads_[static_cast<std::size_t>(head)];
  const TensorView x = x_.view(DType::kF32, {rows, hidden_});
  const TensorView y = y_.view(DType::kF32, {rows, hidden_});
  const TensorView logits = logits_.view(DType::kF32, {rows, out_vocab_});
  backend_.copy(feature_input(rows), x);
  for (std::size_t l = 0; l < hd.weights.size(); ++l) {
    backend_.linear(x, hd.weights[l], hd.biases[l], y);
    backend_.silu_add(y, x, x);
  }
  backend_.linear(x, hd.lm_head, TensorView{}, logits);
  return logits;
}

}  // namespace baton
