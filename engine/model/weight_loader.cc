#include "engine/model/weight_loader.h"

#include <cstring>

#include "common/status.h"

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

}  // namespace

absl::StatusOr<const TensorInfo*> WeightLoader::get(const std::string& name, const std::vector<std::int64_t>& shape,
                                                    const char* meaning) {
  used_.insert(name);
  const TensorInfo* t = ckpt_.find(name);
  if (t == nullptr) {
    return absl::NotFoundError(str_cat(ckpt_.model_dir(), ": tensor `", name, "` is missing (expected ",
                                       shape_str(shape), " = ", meaning, " for ", what_, ")"));
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

absl::StatusOr<TensorView> WeightLoader::matrix(const std::string& name, std::int64_t rows, std::int64_t cols,
                                                const char* meaning) {
  BATON_ASSIGN_OR_RETURN(const TensorInfo* t, get(name, {rows, cols}, meaning));
  const DType target = options_.dtype.value_or(t->dtype);
  if (target == t->dtype && backend_.reads_host_memory()) {
    return TensorView::contiguous(const_cast<std::uint8_t*>(t->data), t->dtype, {rows, cols}, backend_.device());
  }
  return upload({{t, 0, rows}}, target, cols);
}

absl::StatusOr<TensorView> WeightLoader::fused(const std::vector<std::pair<std::string, std::int64_t>>& parts,
                                               std::int64_t cols, const char* meaning) {
  std::vector<Slice> slices;
  for (const auto& [name, r] : parts) {
    BATON_ASSIGN_OR_RETURN(const TensorInfo* t, get(name, {r, cols}, meaning));
    slices.push_back({t, 0, r});
  }
  return upload(slices, options_.dtype.value_or(slices.front().tensor->dtype), cols);
}

absl::StatusOr<TensorView> WeightLoader::regrouped(const std::vector<RowRange>& ranges, std::int64_t cols,
                                                   const char* meaning) {
  std::vector<Slice> slices;
  for (const RowRange& r : ranges) {
    BATON_ASSIGN_OR_RETURN(const TensorInfo* t, get(r.name, {r.rows, cols}, meaning));
    BATON_CHECK(r.begin >= 0 && r.begin <= r.end && r.end <= r.rows, "row range [", r.begin, ", ", r.end, ") of ", r.name);
    slices.push_back({t, r.begin, r.end});
  }
  return upload(slices, options_.dtype.value_or(slices.front().tensor->dtype), cols);
}

absl::StatusOr<TensorView> WeightLoader::for_linear(const TensorView& w) {
  TensorView packed;
  BATON_ASSIGN_OR_RETURN(DeviceBuffer buf, backend_.pack_linear_weight(w, &packed));
  if (buf.data() == nullptr) return w;
  if (!owned_->empty() && owned_->back().data() == w.data) owned_->pop_back();
  owned_->push_back(std::move(buf));
  return packed;
}

absl::StatusOr<TensorView> WeightLoader::vector_f32(const std::vector<std::pair<std::string, std::int64_t>>& parts,
                                                    const char* meaning, float plus) {
  std::vector<Slice> slices;
  std::int64_t n = 0;
  for (const auto& [name, len] : parts) {
    BATON_ASSIGN_OR_RETURN(const TensorInfo* t, get(name, {len}, meaning));
    slices.push_back({t, 0, len});
    n += len;
  }
  BATON_ASSIGN_OR_RETURN(TensorView v, upload(slices, DType::kF32, 1, plus));
  return v.reshape({n});
}

absl::StatusOr<std::vector<std::int64_t>> WeightLoader::int64_vector(const std::string& name, std::int64_t n,
                                                                     const char* meaning) {
  used_.insert(name);
  const TensorInfo* t = ckpt_.find(name);
  if (t == nullptr) {
    return absl::NotFoundError(str_cat(ckpt_.model_dir(), ": tensor `", name, "` is missing (expected I64 [", n,
                                       "] = ", meaning, ")"));
  }
  if (t->dtype != DType::kI64 || t->shape != std::vector<std::int64_t>{n}) {
    return absl::InvalidArgumentError(str_cat(t->file, ": tensor `", name, "` is ", dtype_name(t->dtype), " ",
                                              t->shape_string(), ", expected I64 [", n, "] = ", meaning));
  }
  std::vector<std::int64_t> out(static_cast<std::size_t>(n));
  std::memcpy(out.data(), t->data, t->bytes);
  return out;
}

absl::StatusOr<LayerWeights> WeightLoader::layer(const ModelConfig& c, const std::string& p, const LayerSpec& spec) {
  const std::int64_t h = c.hidden_size, inter = c.intermediate_size;
  const std::int64_t in = spec.in_width > 0 ? spec.in_width : h;
  LayerWeights l;
  if (spec.input_norm) {
    BATON_ASSIGN_OR_RETURN(l.input_norm, norm(c, p + "input_layernorm.weight", h, "[hidden_size]"));
  }
  BATON_ASSIGN_OR_RETURN(l.post_norm, norm(c, p + "post_attention_layernorm.weight", h, "[hidden_size]"));
  if (spec.linear_attention) {
    BATON_RETURN_IF_ERROR(linear_attention(c, p, l));
  } else if (c.attn_output_gate) {
    BATON_RETURN_IF_ERROR(gated_attention(c, p, in, l));
  } else {
    BATON_RETURN_IF_ERROR(attention(c, p, in, l));
  }
  if (spec.experts) {
    BATON_RETURN_IF_ERROR(experts(c, p, l));
    return l;
  }
  BATON_ASSIGN_OR_RETURN(l.gate_up, fused({{p + "mlp.gate_proj.weight", inter}, {p + "mlp.up_proj.weight", inter}}, h,
                                          "[intermediate_size, hidden_size]"));
  BATON_ASSIGN_OR_RETURN(l.gate_up, for_linear(l.gate_up));
  BATON_ASSIGN_OR_RETURN(l.down, matrix(p + "mlp.down_proj.weight", h, inter, "[hidden_size, intermediate_size]"));
  BATON_ASSIGN_OR_RETURN(l.down, for_linear(l.down));
  return l;
}

absl::Status WeightLoader::attention(const ModelConfig& c, const std::string& p, std::int64_t in, LayerWeights& l) {
  const std::int64_t q = c.q_size(), kv = c.kv_size();
  BATON_ASSIGN_OR_RETURN(l.qkv, fused({{p + "self_attn.q_proj.weight", q},
                                       {p + "self_attn.k_proj.weight", kv},
                                       {p + "self_attn.v_proj.weight", kv}},
                                      in, "[heads * head_dim, input width] (k, v: kv_heads * head_dim)"));
  BATON_ASSIGN_OR_RETURN(l.qkv, for_linear(l.qkv));
  if (c.qkv_bias) {
    BATON_ASSIGN_OR_RETURN(l.qkv_bias, vector_f32({{p + "self_attn.q_proj.bias", q},
                                                   {p + "self_attn.k_proj.bias", kv},
                                                   {p + "self_attn.v_proj.bias", kv}},
                                                  "[heads * head_dim] (k, v: kv_heads * head_dim)"));
  }
  return attention_tail(c, p, l);
}

absl::Status WeightLoader::attention_tail(const ModelConfig& c, const std::string& p, LayerWeights& l) {
  const std::int64_t h = c.hidden_size, q = c.q_size();
  if (c.qk_norm) {
    BATON_ASSIGN_OR_RETURN(l.q_norm, norm(c, p + "self_attn.q_norm.weight", c.head_dim, "[head_dim]"));
    BATON_ASSIGN_OR_RETURN(l.k_norm, norm(c, p + "self_attn.k_norm.weight", c.head_dim, "[head_dim]"));
  }
  BATON_ASSIGN_OR_RETURN(l.o_proj, matrix(p + "self_attn.o_proj.weight", h, q, "[hidden_size, heads * head_dim]"));
  BATON_ASSIGN_OR_RETURN(l.o_proj, for_linear(l.o_proj));
  if (c.o_bias) {
    BATON_ASSIGN_OR_RETURN(l.o_bias, vector_f32({{p + "self_attn.o_proj.bias", h}}, "[hidden_size]"));
  }
  return absl::OkStatus();
}

absl::Status WeightLoader::gated_attention(const ModelConfig& c, const std::string& p, std::int64_t in, LayerWeights& l) {
  // q_proj's output is, per head, [query (head_dim); gate (head_dim)]: its query rows of every
  // head, then k and v, then its gate rows.
  const std::int64_t hd = c.head_dim, q_rows = 2LL * c.q_size(), kv = c.kv_size();
  const std::string q_proj = p + "self_attn.q_proj.weight";
  std::vector<RowRange> rows;
  for (std::int64_t head = 0; head < c.num_heads; ++head) rows.push_back({q_proj, q_rows, 2 * head * hd, (2 * head + 1) * hd});
  rows.push_back({p + "self_attn.k_proj.weight", kv, 0, kv});
  rows.push_back({p + "self_attn.v_proj.weight", kv, 0, kv});
  for (std::int64_t head = 0; head < c.num_heads; ++head) {
    rows.push_back({q_proj, q_rows, (2 * head + 1) * hd, (2 * head + 2) * hd});
  }
  BATON_ASSIGN_OR_RETURN(l.qkv, regrouped(rows, in,
                                          "[heads * 2 head_dim, input width] (per head query then gate; k, v: "
                                          "kv_heads * head_dim)"));
  BATON_ASSIGN_OR_RETURN(l.qkv, for_linear(l.qkv));
  return attention_tail(c, p, l);
}

absl::Status WeightLoader::linear_attention(const ModelConfig& c, const std::string& p, LayerWeights& l) {
  const LinearAttentionConfig& la = c.linear_attention;
  const std::int64_t h = c.hidden_size, nk = la.num_key_heads, r = la.num_value_heads / la.num_key_heads;
  const std::int64_t dk = la.key_head_dim, dv = la.value_head_dim;
  if (c.architecture == Architecture::kQwen35) {
    // Qwen3.5 stores the parts apart, each in head order: stacked, they are the layout itself.
    const std::string x = p + "linear_attn.";
    BATON_ASSIGN_OR_RETURN(l.in_proj, fused({{x + "in_proj_qkv.weight", la.conv_channels()},
                                             {x + "in_proj_z.weight", la.value_dim()},
                                             {x + "in_proj_b.weight", la.num_value_heads},
                                             {x + "in_proj_a.weight", la.num_value_heads}},
                                            h, "[2 key_dim + value_dim | value_dim | v_heads | v_heads, hidden_size]"));
    return linear_attention_tail(c, p, l);
  }
  // in_proj_qkvz's output is, per key head g, [q_g (dk); k_g (dk); v_g (r dv); z_g (r dv)], and
  // in_proj_ba's [b_g (r); a_g (r)]: gather each part across the groups.
  const std::string qkvz = p + "linear_attn.in_proj_qkvz.weight", ba = p + "linear_attn.in_proj_ba.weight";
  const std::int64_t group = 2 * dk + 2 * r * dv, qkvz_rows = nk * group, ba_rows = 2 * nk * r;
  std::vector<RowRange> rows;
  const std::int64_t part_begin[] = {0, dk, 2 * dk, 2 * dk + r * dv}, part_len[] = {dk, dk, r * dv, r * dv};
  for (int part = 0; part < 4; ++part) {
    for (std::int64_t g = 0; g < nk; ++g) {
      const std::int64_t b = g * group + part_begin[part];
      rows.push_back({qkvz, qkvz_rows, b, b + part_len[part]});
    }
  }
  for (std::int64_t part = 0; part < 2; ++part) {
    for (std::int64_t g = 0; g < nk; ++g) rows.push_back({ba, ba_rows, g * 2 * r + part * r, g * 2 * r + (part + 1) * r});
  }
  BATON_ASSIGN_OR_RETURN(l.in_proj, regrouped(rows, h,
                                              "[k_heads * (2 key_dim + 2 (v_heads / k_heads) value_dim), hidden_size] "
                                              "(in_proj_ba: [2 v_heads, hidden_size])"));
  return linear_attention_tail(c, p, l);
}

absl::Status WeightLoader::linear_attention_tail(const ModelConfig& c, const std::string& p, LayerWeights& l) {
  const LinearAttentionConfig& la = c.linear_attention;
  const std::int64_t h = c.hidden_size, dv = la.value_head_dim;
  BATON_ASSIGN_OR_RETURN(l.in_proj, for_linear(l.in_proj));
  const std::int64_t channels = la.conv_channels(), taps = la.conv_kernel;
  BATON_ASSIGN_OR_RETURN(const TensorInfo* conv, get(p + "linear_attn.conv1d.weight", {channels, 1, taps},
                                                     "[2 key_heads * key_dim + value_heads * value_dim, 1, conv_kernel]"));
  BATON_ASSIGN_OR_RETURN(l.conv, upload({{conv, 0, channels}}, DType::kF32, taps));
  BATON_ASSIGN_OR_RETURN(l.a_log, vector_f32({{p + "linear_attn.A_log", la.num_value_heads}}, "[linear_num_value_heads]"));
  BATON_ASSIGN_OR_RETURN(l.dt_bias,
                         vector_f32({{p + "linear_attn.dt_bias", la.num_value_heads}}, "[linear_num_value_heads]"));
  // The gated norm's weight is an ordinary one (not zero-centred).
  BATON_ASSIGN_OR_RETURN(l.gated_norm, vector_f32({{p + "linear_attn.norm.weight", dv}}, "[linear_value_head_dim]"));
  BATON_ASSIGN_OR_RETURN(l.out_proj, matrix(p + "linear_attn.out_proj.weight", h, la.value_dim(),
                                            "[hidden_size, linear_num_value_heads * linear_value_head_dim]"));
  BATON_ASSIGN_OR_RETURN(l.out_proj, for_linear(l.out_proj));
  l.mixer = MixerKind::kLinearAttention;
  return absl::OkStatus();
}

absl::Status WeightLoader::experts(const ModelConfig& c, const std::string& p, LayerWeights& l) {
  const std::int64_t h = c.hidden_size, inter = c.moe_intermediate_size;
  BATON_ASSIGN_OR_RETURN(l.router, matrix(p + "mlp.gate.weight", c.num_experts, h, "[num_experts, hidden_size]"));
  BATON_ASSIGN_OR_RETURN(l.router, for_linear(l.router));
  l.experts.top_k = c.num_experts_per_tok;
  l.experts.normalize = c.norm_topk_prob;
  for (std::int32_t e = 0; e < c.num_experts; ++e) {
    const std::string x = str_cat(p, "mlp.experts.", e, ".");
    BATON_ASSIGN_OR_RETURN(TensorView gate_up, fused({{x + "gate_proj.weight", inter}, {x + "up_proj.weight", inter}}, h,
                                                     "[moe_intermediate_size, hidden_size]"));
    BATON_ASSIGN_OR_RETURN(gate_up, for_linear(gate_up));
    BATON_ASSIGN_OR_RETURN(TensorView down, matrix(x + "down_proj.weight", h, inter,
                                                   "[hidden_size, moe_intermediate_size]"));
    BATON_ASSIGN_OR_RETURN(down, for_linear(down));
    l.experts.gate_up.push_back(gate_up);
    l.experts.down.push_back(down);
  }
  if (c.shared_expert_intermediate_size > 0) {
    const std::int64_t s = c.shared_expert_intermediate_size;
    const std::string x = p + "mlp.shared_expert.";
    BATON_ASSIGN_OR_RETURN(l.experts.shared_gate_up, fused({{x + "gate_proj.weight", s}, {x + "up_proj.weight", s}}, h,
                                                           "[shared_expert_intermediate_size, hidden_size]"));
    BATON_ASSIGN_OR_RETURN(l.experts.shared_gate_up, for_linear(l.experts.shared_gate_up));
    BATON_ASSIGN_OR_RETURN(l.experts.shared_down, matrix(x + "down_proj.weight", h, s,
                                                         "[hidden_size, shared_expert_intermediate_size]"));
    BATON_ASSIGN_OR_RETURN(l.experts.shared_down, for_linear(l.experts.shared_down));
    BATON_ASSIGN_OR_RETURN(l.experts.shared_gate, matrix(p + "mlp.shared_expert_gate.weight", 1, h, "[1, hidden_size]"));
    BATON_ASSIGN_OR_RETURN(l.experts.shared_gate, for_linear(l.experts.shared_gate));
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorView> WeightLoader::upload(const std::vector<Slice>& slices, DType target, std::int64_t cols,
                                                float plus) {
  std::int64_t rows = 0;
  for (const Slice& s : slices) rows += s.end - s.begin;
  const std::size_t bytes = static_cast<std::size_t>(rows * cols) * dtype_size(target);
  std::vector<std::uint8_t> host(bytes);
  std::size_t offset = 0;
  for (const Slice& s : slices) {
    const std::int64_t n = (s.end - s.begin) * cols;
    convert(s.tensor->data + static_cast<std::size_t>(s.begin * cols) * dtype_size(s.tensor->dtype), s.tensor->dtype,
            host.data() + offset, target, n);
    offset += static_cast<std::size_t>(n) * dtype_size(target);
  }
  if (plus != 0.0f) {
    BATON_CHECK(target == DType::kF32, "an offset applies to F32 vectors only");
    auto* f = reinterpret_cast<float*>(host.data());
    for (std::int64_t i = 0; i < rows * cols; ++i) f[i] += plus;
  }
  BATON_ASSIGN_OR_RETURN(DeviceBuffer buf, backend_.allocate(bytes));
  backend_.copy_to_device(buf.data(), host.data(), bytes);
  TensorView v = buf.view(target, {rows, cols});
  owned_->push_back(std::move(buf));
  return v;
}

}  // namespace baton
