#include "engine/model/weights.h"

#include <cstring>
#include <set>

#include "common/status.h"
#include "spdlog/spdlog.h"

namespace baton {
namespace {

std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += str_cat(i ? ", " : "", s[i]);
  return out + "]";
}

void convert(const std::uint8_t* src, DType from, std::uint8_t* dst, DType to, std::int64_t n) {
  if (from == to) {
    std::memcpy(dst, src, static_cast<std::size_t>(n) * dtype_size(from));
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    float v = 0;
    switch (from) {
      case DType::kF32: std::memcpy(&v, src + i * 4, 4); break;
      case DType::kBF16: { std::uint16_t h; std::memcpy(&h, src + i * 2, 2); v = bf16_to_f32(h); break; }
      case DType::kF16: { std::uint16_t h; std::memcpy(&h, src + i * 2, 2); v = f16_to_f32(h); break; }
      default: BATON_CHECK(false, "convert from ", dtype_name(from));
    }
    switch (to) {
      case DType::kF32: std::memcpy(dst + i * 4, &v, 4); break;
      case DType::kBF16: { const std::uint16_t h = f32_to_bf16(v); std::memcpy(dst + i * 2, &h, 2); break; }
      case DType::kF16: { const std::uint16_t h = f32_to_f16(v); std::memcpy(dst + i * 2, &h, 2); break; }
      default: BATON_CHECK(false, "convert to ", dtype_name(to));
    }
  }
}

bool is_float(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }

class Loader {
 public:
  Loader(const ModelConfig& config, const Checkpoint& ckpt, Backend& backend, const WeightLoadOptions& options,
         std::vector<DeviceBuffer>* owned)
      : config_(config), ckpt_(ckpt), backend_(backend), options_(options), owned_(owned) {}

  // The tensor `name` with exactly `shape`, or an error that names both shapes and their meaning.
  absl::StatusOr<const TensorInfo*> get(const std::string& name, const std::vector<std::int64_t>& shape,
                                        const char* meaning) {
    used_.insert(name);
    const TensorInfo* t = ckpt_.find(name);
    if (t == nullptr) {
      return absl::NotFoundError(str_cat(ckpt_.model_dir(), ": tensor `", name, "` is missing (expected ",
                                         shape_str(shape), " = ", meaning, " for ", config_.architecture_name, ")"));
    }
    if (!is_float(t->dtype)) {
      return absl::InvalidArgumentError(str_cat(t->file, ": tensor `", name, "` has dtype ", dtype_name(t->dtype),
                                                "; weights must be F32, BF16 or F16"));
    }
    if (t->shape != shape) {
      return absl::InvalidArgumentError(str_cat(t->file, ": tensor `", name, "` has shape ", t->shape_string(),
                                                ", expected ", shape_str(shape), " = ", meaning));
    }
    return t;
  }

  // A matrix (or embedding table) in its stored dtype or the override, in place when possible.
  absl::StatusOr<TensorView> matrix(const std::string& name, std::int64_t rows, std::int64_t cols, const char* meaning) {
    BATON_ASSIGN_OR_RETURN(const TensorInfo* t, get(name, {rows, cols}, meaning));
    const DType target = options_.dtype.value_or(t->dtype);
    if (target == t->dtype && backend_.reads_host_memory()) {
      return TensorView::contiguous(const_cast<std::uint8_t*>(t->data), t->dtype, {rows, cols}, backend_.device());
    }
    return upload({t}, target, rows, cols);
  }

  // Row-wise concatenation of several [r_i, cols] matrices into one [sum r_i, cols] buffer.
  absl::StatusOr<TensorView> fused(const std::vector<std::pair<std::string, std::int64_t>>& parts, std::int64_t cols,
                                   const char* meaning) {
    std::vector<const TensorInfo*> infos;
    std::int64_t rows = 0;
    for (const auto& [name, r] : parts) {
      BATON_ASSIGN_OR_RETURN(const TensorInfo* t, get(name, {r, cols}, meaning));
      infos.push_back(t);
      rows += r;
    }
    return upload(infos, options_.dtype.value_or(infos.front()->dtype), rows, cols);
  }

  // A vector (norm weight or bias) as F32; several are concatenated.
  absl::StatusOr<TensorView> vector_f32(const std::vector<std::pair<std::string, std::int64_t>>& parts, const char* meaning) {
    std::vector<const TensorInfo*> infos;
    std::int64_t n = 0;
    for (const auto& [name, len] : parts) {
      BATON_ASSIGN_OR_RETURN(const TensorInfo* t, get(name, {len}, meaning));
      infos.push_back(t);
      n += len;
    }
    BATON_ASSIGN_OR_RETURN(TensorView v, upload(infos, DType::kF32, n, 1));
    return v.reshape({n});
  }

  std::set<std::string> used() const { return used_; }

 private:
  absl::StatusOr<TensorView> upload(const std::vector<const TensorInfo*>& parts, DType target, std::int64_t rows,
                                    std::int64_t cols) {
    const std::size_t bytes = static_cast<std::size_t>(rows * cols) * dtype_size(target);
    std::vector<std::uint8_t> host(bytes);
    std::size_t offset = 0;
    for (const TensorInfo* t : parts) {
      convert(t->data, t->dtype, host.data() + offset, target, t->numel());
      offset += static_cast<std::size_t>(t->numel()) * dtype_size(target);
    }
    BATON_ASSIGN_OR_RETURN(DeviceBuffer buf, backend_.allocate(bytes));
    backend_.copy_to_device(buf.data(), host.data(), bytes);
    TensorView v = buf.view(target, {rows, cols});
    owned_->push_back(std::move(buf));
    return v;
  }

  const ModelConfig& config_;
  const Checkpoint& ckpt_;
  Backend& backend_;
  const WeightLoadOptions& options_;
  std::vector<DeviceBuffer>* owned_;
  std::set<std::string> used_;
};

}  // namespace

bool is_ignorable_tensor(const std::string& name) {
  return name.ends_with("rotary_emb.inv_freq");
}

absl::StatusOr<ModelWeights> ModelWeights::load(const ModelConfig& c, std::shared_ptr<const Checkpoint> ckpt,
                                                Backend& backend, const WeightLoadOptions& options) {
  if (options.dtype && !is_float(*options.dtype)) {
    return absl::InvalidArgumentError(str_cat("weight dtype override must be F32, BF16 or F16, got ", dtype_name(*options.dtype)));
  }
  ModelWeights w;
  w.checkpoint_ = ckpt;
  Loader load(c, *ckpt, backend, options, &w.owned_);
  const std::int64_t h = c.hidden_size, q = c.q_size(), kv = c.kv_size(), inter = c.intermediate_size;
  BATON_ASSIGN_OR_RETURN(w.embed, load.matrix("model.embed_tokens.weight", c.vocab_size, h, "[vocab_size, hidden_size]"));
  BATON_ASSIGN_OR_RETURN(w.final_norm, load.vector_f32({{"model.norm.weight", h}}, "[hidden_size]"));
  if (c.tie_word_embeddings) {
    w.lm_head = w.embed;
  } else {
    BATON_ASSIGN_OR_RETURN(w.lm_head, load.matrix("lm_head.weight", c.vocab_size, h, "[vocab_size, hidden_size]"));
  }
  for (std::int32_t i = 0; i < c.num_layers; ++i) {
    const std::string p = str_cat("model.layers.", i, ".");
    LayerWeights l;
    BATON_ASSIGN_OR_RETURN(l.input_norm, load.vector_f32({{p + "input_layernorm.weight", h}}, "[hidden_size]"));
    BATON_ASSIGN_OR_RETURN(l.post_norm, load.vector_f32({{p + "post_attention_layernorm.weight", h}}, "[hidden_size]"));
    BATON_ASSIGN_OR_RETURN(l.qkv, load.fused({{p + "self_attn.q_proj.weight", q},
                                              {p + "self_attn.k_proj.weight", kv},
                                              {p + "self_attn.v_proj.weight", kv}},
                                             h, "[heads * head_dim, hidden_size] (k, v: kv_heads * head_dim)"));
    if (c.qkv_bias) {
      BATON_ASSIGN_OR_RETURN(l.qkv_bias, load.vector_f32({{p + "self_attn.q_proj.bias", q},
                                                          {p + "self_attn.k_proj.bias", kv},
                                                          {p + "self_attn.v_proj.bias", kv}},
                                                         "[heads * head_dim] (k, v: kv_heads * head_dim)"));
    }
    if (c.qk_norm) {
      BATON_ASSIGN_OR_RETURN(l.q_norm, load.vector_f32({{p + "self_attn.q_norm.weight", c.head_dim}}, "[head_dim]"));
      BATON_ASSIGN_OR_RETURN(l.k_norm, load.vector_f32({{p + "self_attn.k_norm.weight", c.head_dim}}, "[head_dim]"));
    }
    BATON_ASSIGN_OR_RETURN(l.o_proj, load.matrix(p + "self_attn.o_proj.weight", h, q, "[hidden_size, heads * head_dim]"));
    if (c.o_bias) {
      BATON_ASSIGN_OR_RETURN(l.o_bias, load.vector_f32({{p + "self_attn.o_proj.bias", h}}, "[hidden_size]"));
    }
    BATON_ASSIGN_OR_RETURN(l.gate_up, load.fused({{p + "mlp.gate_proj.weight", inter}, {p + "mlp.up_proj.weight", inter}},
                                                 h, "[intermediate_size, hidden_size]"));
    BATON_ASSIGN_OR_RETURN(l.down, load.matrix(p + "mlp.down_proj.weight", h, inter, "[hidden_size, intermediate_size]"));
    w.layers.push_back(l);
  }
  const std::set<std::string> used = load.used();
  std::vector<std::string> unused;
  for (const std::string& name : ckpt->names()) {
    if (!used.contains(name) && !is_ignorable_tensor(name) && !(c.tie_word_embeddings && name == "lm_head.weight")) {
      unused.push_back(name);
    }
  }
  if (!unused.empty()) {
    spdlog::warn("{}: {} tensors are not used by {} (first: {})", ckpt->model_dir(), unused.size(),
                 c.architecture_name, unused.front());
  }
  return w;
}

std::int64_t ModelWeights::bytes_per_decode_step() const {
  auto bytes = [](const TensorView& v) {
    return v.empty() ? 0 : v.numel() * static_cast<std::int64_t>(dtype_size(v.dtype));
  };
  std::int64_t total = bytes(lm_head) + bytes(final_norm);
  for (const LayerWeights& l : layers) {
    total += bytes(l.input_norm) + bytes(l.qkv) + bytes(l.qkv_bias) + bytes(l.q_norm) + bytes(l.k_norm) +
             bytes(l.o_proj) + bytes(l.o_bias) + bytes(l.post_norm) + bytes(l.gate_up) + bytes(l.down);
  }
  return total;
}

std::string ModelWeights::matrix_dtype() const {
  std::set<std::string> names;
  names.insert(std::string(dtype_name(lm_head.dtype)));
  for (const LayerWeights& l : layers) {
    for (const TensorView* v : {&l.qkv, &l.o_proj, &l.gate_up, &l.down}) names.insert(std::string(dtype_name(v->dtype)));
  }
  return names.size() == 1 ? *names.begin() : std::string("mixed");
}

}  // namespace baton
