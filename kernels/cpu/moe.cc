// CpuBackend::moe: mixture-of-experts MLPs (Qwen3-MoE, Qwen2-MoE's shared expert) on the host.
//
// Each token is routed on its own (softmax of its router logits, its top_k experts by probability,
// ties to the lower expert); the tokens are grouped by expert, in token order, and each expert
// runs one linear() over its rows, SiLU-and-multiply and its down projection; each token's output
// is then the weighted sum of its experts' rows in its top_k order. Every step computes a row the
// same way whatever else is in the batch (linear() is batch-invariant), so a token's output does
// not depend on the other tokens, nor on which of them share its experts.
//
// Must not: allocate device memory (the routing tables are small host vectors: on the CPU the
// device is the host), or change the result with the thread count.
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/rows.h"

namespace baton::cpu {
namespace {

// Token `logits`' top_k experts (largest probability first, ties to the lower index) and their
// weights: softmax probabilities, divided by their sum when `normalize`.
void route(const float* logits, std::int64_t num_experts, std::int32_t top_k, bool normalize,
           std::int32_t* experts, float* weights) {
  float max = logits[0];
  for (std::int64_t e = 1; e < num_experts; ++e) max = std::max(max, logits[e]);
  float sum = 0;
  for (std::int64_t e = 0; e < num_experts; ++e) sum += std::exp(logits[e] - max);
  float chosen_sum = 0;
  for (std::int32_t j = 0; j < top_k; ++j) {
    std::int64_t best = -1;
    for (std::int64_t e = 0; e < num_experts; ++e) {
      bool taken = false;
      for (std::int32_t i = 0; i < j; ++i) taken = taken || experts[i] == e;
      if (!taken && (best < 0 || logits[e] > logits[best])) best = e;
    }
    experts[j] = static_cast<std::int32_t>(best);
    weights[j] = std::exp(logits[best] - max) / sum;
    chosen_sum += weights[j];
  }
  if (normalize) {
    for (std::int32_t j = 0; j < top_k; ++j) weights[j] /= chosen_sum;
  }
}

}  // namespace

void CpuBackend::moe(const TensorView& x, const TensorView& router_logits, const MoeExperts& experts,
                     const MoeScratch& scratch, const TensorView& out) {
  if (recorded([=, this] { moe(x, router_logits, experts, scratch, out); })) return;
  const Rows<const float> in(x);
  const Rows<const float> logits(router_logits);
  const Rows<float> o(out);
  const std::int64_t tokens = in.count(), hidden = in.cols(), num_experts = logits.cols();
  const std::int32_t k = experts.top_k;
  BATON_CHECK(x.dtype == DType::kF32 && out.dtype == DType::kF32 && router_logits.dtype == DType::kF32 &&
                  logits.count() == tokens && o.count() == tokens && o.cols() == hidden && k > 0 &&
                  k <= num_experts && static_cast<std::int64_t>(experts.gate_up.size()) == num_experts &&
                  experts.down.size() == experts.gate_up.size() && scratch.rows.dim(0) >= tokens * k &&
                  scratch.out.dim(0) >= tokens * k,
              "moe shapes: x ", x.describe(), ", router logits ", router_logits.describe(), ", top_k ", k, ", ",
              experts.gate_up.size(), " experts, out ", out.describe());
  if (tokens == 0) return;

  // Each token's experts and weights; then every (token, j) pair's row in the expert-grouped order.
  const std::int64_t pairs = tokens * k;
  std::vector<std::int32_t> expert_of(static_cast<std::size_t>(pairs));
  std::vector<float> weight_of(static_cast<std::size_t>(pairs));
  pool_.parallel_for(tokens, std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(1, num_experts)), 1,
                     [&](std::int64_t b, std::int64_t e) {
                       for (std::int64_t t = b; t < e; ++t) {
                         route(logits.row(t), num_experts, k, experts.normalize, &expert_of[static_cast<std::size_t>(t * k)],
                               &weight_of[static_cast<std::size_t>(t * k)]);
                       }
                     });
  std::vector<std::int64_t> start(static_cast<std::size_t>(num_experts) + 1, 0);
  for (std::int32_t e : expert_of) ++start[static_cast<std::size_t>(e) + 1];
  for (std::int64_t e = 0; e < num_experts; ++e) start[static_cast<std::size_t>(e) + 1] += start[static_cast<std::size_t>(e)];
  std::vector<std::int64_t> next(start.begin(), start.end() - 1);
  std::vector<std::int32_t> source(static_cast<std::size_t>(pairs));  // grouped row -> token
  std::vector<std::int64_t> row_of(static_cast<std::size_t>(pairs));   // (token, j) -> grouped row
  for (std::int64_t p = 0; p < pairs; ++p) {
    const std::int64_t row = next[static_cast<std::size_t>(expert_of[static_cast<std::size_t>(p)])]++;
    source[static_cast<std::size_t>(row)] = static_cast<std::int32_t>(p / k);
    row_of[static_cast<std::size_t>(p)] = row;
  }

  gather_rows(x, TensorView::contiguous(source.data(), DType::kI32, {pairs}, device()), scratch.rows.slice0(0, pairs));
  for (std::int64_t e = 0; e < num_experts; ++e) {
    const std::int64_t b = start[static_cast<std::size_t>(e)], end = start[static_cast<std::size_t>(e) + 1];
    if (b == end) continue;
    const auto i = static_cast<std::size_t>(e);
    linear(scratch.rows.slice0(b, end), experts.gate_up[i], TensorView{}, scratch.gate_up.slice0(b, end));
    silu_mul(scratch.gate_up.slice0(b, end), scratch.act.slice0(b, end));
    linear(scratch.act.slice0(b, end), experts.down[i], TensorView{}, scratch.out.slice0(b, end));
  }

  // The shared expert and its gate, from x before out (which may alias it) is written.
  const bool shared = !experts.shared_gate_up.empty();
  if (shared) {
    BATON_CHECK(scratch.shared_out.dim(0) >= tokens && scratch.shared_logit.dim(0) >= tokens,
                "moe shared-expert scratch: ", scratch.shared_out.describe());
    linear(x, experts.shared_gate_up, TensorView{}, scratch.shared_gate_up.slice0(0, tokens));
    silu_mul(scratch.shared_gate_up.slice0(0, tokens), scratch.shared_act.slice0(0, tokens));
    linear(scratch.shared_act.slice0(0, tokens), experts.shared_down, TensorView{}, scratch.shared_out.slice0(0, tokens));
    linear(x, experts.shared_gate, TensorView{}, scratch.shared_logit.slice0(0, tokens));
  }
  const Rows<const float> shared_out(shared ? scratch.shared_out : scratch.out);
  const Rows<const float> shared_logit(shared ? scratch.shared_logit : scratch.out);

  // out[t] = sum_j weight_j * expert row, in the token's top_k order (+ the gated shared expert).
  const Rows<const float> expert_out(scratch.out);
  pool_.parallel_for(tokens, min_rows_per_thread(hidden * k), 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t t = b; t < e; ++t) {
      float* dst = o.row(t);
      for (std::int32_t j = 0; j < k; ++j) {
        const auto p = static_cast<std::size_t>(t * k + j);
        const float* src = expert_out.row(row_of[p]);
        const float w = weight_of[p];
        if (j == 0) {
          for (std::int64_t c = 0; c < hidden; ++c) dst[c] = w * src[c];
        } else {
          for (std::int64_t c = 0; c < hidden; ++c) dst[c] += w * src[c];
        }
      }
      if (shared) {
        const float gate = 1.0f / (1.0f + std::exp(-shared_logit.row(t)[0]));
        const float* src = shared_out.row(t);
        for (std::int64_t c = 0; c < hidden; ++c) dst[c] += gate * src[c];
      }
    }
  });
}

}  // namespace baton::cpu
