#include "kernels/cpu/cpu_backend.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "kernels/cpu/argmax.h"
#include "kernels/cpu/host_memory.h"
#include "kernels/philox.h"
#include "kernels/cpu/rows.h"
#include "kernels/step_profile.h"

namespace baton::cpu {
namespace {

void check_f32(const TensorView& v, const char* what) {
  BATON_CHECK(v.dtype == DType::kF32, what, " must be F32: ", v.describe());
}

}  // namespace

const KernelTable& kernel_table_for(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512: return avx512_kernel_table();
    case CpuIsa::kAvx512Bf16: return avx512_bf16_kernel_table();
    case CpuIsa::kAvx2: return avx2_kernel_table();
    case CpuIsa::kPortable: break;
  }
  return portable_kernel_table();
}

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::create(const BackendOptions& options) {
  if (options.num_threads < 0) {
    return absl::InvalidArgumentError(str_cat("num_threads must be >= 0 (got ", options.num_threads, ")"));
  }
  const CpuFeatures features = CpuFeatures::detect();
  BATON_ASSIGN_OR_RETURN(const CpuIsa isa, resolve_isa(options.cpu_isa, features));
  blas_init_single_threaded();
  return std::unique_ptr<CpuBackend>(new CpuBackend(options, isa, features));
}

CpuBackend::CpuBackend(const BackendOptions& options, CpuIsa isa, const CpuFeatures& features)
    : options_(options), isa_(isa), features_(features), kernels_(&kernel_table_for(isa)),
      pool_(options.num_threads) {}

std::string CpuBackend::describe() const {
  return str_cat("cpu (", kernels_->name, " kernels, ", pool_.size(), " threads, ",
                      options_.batch_invariant ? "batch-invariant" : "NOT batch-invariant",
                      options_.cpu_discrete_memory ? ", discrete memory (test)" : "",
                      "; cpu has ", features_.describe(), ")");
}

absl::StatusOr<DeviceBuffer> CpuBackend::allocate(std::size_t bytes) {
  breaks_capture("allocate");
  void* p = allocate_host(bytes);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(str_cat("cpu backend: cannot allocate ", bytes, " bytes"));
  }
  return DeviceBuffer(this, p, bytes);
}

absl::StatusOr<DeviceBuffer> CpuBackend::allocate_staging(std::size_t bytes) {
  breaks_capture("allocate_staging");
  void* p = allocate_host(bytes);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(str_cat("cpu backend: cannot allocate ", bytes, " bytes of staging memory"));
  }
  return DeviceBuffer(this, p, bytes, /*staging=*/true);
}

void CpuBackend::free_staging(void* data, std::size_t /*bytes*/) { free_host(data); }

void CpuBackend::free(void* data, std::size_t /*bytes*/) {
  {
    const std::lock_guard<std::mutex> lock(packed_mu_);
    packed_.erase(data);
  }
  if (!weight_slabs_.free(data)) free_host(data);
}

absl::StatusOr<DeviceBuffer> CpuBackend::pack_linear_weight(const TensorView& weight, TensorView* packed) {
  breaks_capture("pack_linear_weight");
  // The non-invariant opt-in hands F32 GEMMs with many rows to OpenBLAS, which reads row-major
  // weights. (The BF16-dot tier has its own kernel over the same panels.)
  const bool wanted = weight.ndim == 2 && weight.stride(1) == 1 && packable_weight_dtype(weight.dtype) &&
                      (options_.batch_invariant || weight.dtype != DType::kF32);
  if (!wanted || weight.dim(0) == 0 || weight.dim(1) == 0) return DeviceBuffer();
  const std::int64_t n = weight.dim(0), k = weight.dim(1);
  const auto bytes = static_cast<std::size_t>(packed_weight_bytes(weight.dtype, n, k));
  DeviceBuffer buf;
  if (bytes < WeightSlabs::kMaxPieceBytes) {
    void* p = weight_slabs_.allocate(bytes);
    if (p == nullptr) return absl::ResourceExhaustedError(str_cat("cpu backend: cannot allocate ", bytes, " bytes"));
    buf = DeviceBuffer(this, p, bytes);
  } else {
    BATON_ASSIGN_OR_RETURN(buf, allocate(bytes));
  }
  pack_weight(weight.data, weight.dtype, n, k, weight.stride(0), buf.data());
  {
    const std::lock_guard<std::mutex> lock(packed_mu_);
    packed_[buf.data()] = PackedWeight{weight.dtype, n, k};
  }
  *packed = TensorView::contiguous(buf.data(), weight.dtype, {n, k}, device());
  return buf;
}

std::optional<CpuBackend::PackedWeight> CpuBackend::find_packed(const void* data) const {
  const std::lock_guard<std::mutex> lock(packed_mu_);
  const auto it = packed_.find(data);
  if (it == packed_.end()) return std::nullopt;
  return it->second;
}

void CpuBackend::copy_to_device(void* dst, const void* host_src, std::size_t bytes) {
  breaks_capture("copy_to_device");
  if (bytes > 0) std::memcpy(dst, host_src, bytes);
}
void CpuBackend::copy_to_host(void* host_dst, const void* src, std::size_t bytes) {
  breaks_capture("copy_to_host");
  if (bytes > 0) std::memcpy(host_dst, src, bytes);
}
void CpuBackend::copy_on_device(void* dst, const void* src, std::size_t bytes) {
  if (recorded([=, this] { copy_on_device(dst, src, bytes); })) return;
  if (bytes > 0) std::memmove(dst, src, bytes);
}

void CpuBackend::linear(const TensorView& x, const TensorView& weight, const TensorView& bias,
                        const TensorView& out) {
  if (recorded([=, this] { linear(x, weight, bias, out); })) return;
  const ProfileScope profile(ProfileClass::kGemm);
  check_f32(x, "linear input");
  check_f32(out, "linear output");
  BATON_CHECK(x.ndim == 2 && weight.ndim == 2 && out.ndim == 2, "linear expects 2-D views: x ",
              x.describe(), ", w ", weight.describe(), ", out ", out.describe());
  BATON_CHECK(weight.dim(1) == x.dim(1) && out.dim(0) == x.dim(0) && out.dim(1) == weight.dim(0),
              "linear shapes: x ", x.describe(), ", w ", weight.describe(), ", out ", out.describe());
  BATON_CHECK(x.stride(1) == 1 && weight.stride(1) == 1 && out.stride(1) == 1,
              "linear needs contiguous rows");
  BATON_CHECK(weight.dtype == DType::kF32 || weight.dtype == DType::kBF16 || weight.dtype == DType::kF16,
              "linear weight dtype: ", weight.describe());
  if (!bias.empty()) {
    check_f32(bias, "linear bias");
    BATON_CHECK(bias.numel() == weight.dim(0), "bias ", bias.describe(), " for weight ", weight.describe());
  }
  const std::int64_t n = weight.dim(0);
  if (x.dim(0) == 0 || n == 0) return;
  // Threads split output columns, so each thread streams its own slice of the weights once. A
  // thread's share must be worth a wake-up (tiny GEMMs run on the calling thread alone).
  constexpr std::int64_t kMinMacsPerThread = 1 << 16;
  const std::int64_t kMinColsPerThread =
      std::max<std::int64_t>(16, kMinMacsPerThread / std::max<std::int64_t>(1, x.dim(0) * x.dim(1)));
  const KernelTable& k = *kernels_;
  if (const std::optional<PackedWeight> p = find_packed(weight.data)) {
    BATON_CHECK(p->dtype == weight.dtype && p->n == n && p->k == weight.dim(1),
                "packed weight view ", weight.describe(), " does not match what was packed there");
    PackedGemmArgs pa;
    pa.x = x.ptr<const float>();
    pa.ldx = x.stride(0);
    pa.w = weight.data;
    pa.w_dtype = weight.dtype;
    pa.n = n;
    pa.bias = bias.empty() ? nullptr : bias.ptr<const float>();
    pa.y = out.ptr<float>();
    pa.ldy = out.stride(0);
    pa.rows = x.dim(0);
    pa.k = x.dim(1);
    pool_.parallel_for(num_panels(n), std::max<std::int64_t>(1, kMinColsPerThread / kPanelCols), 1,
                       [&](std::int64_t b, std::int64_t e) { k.gemm_packed(pa, b, e); });
    return;
  }
  GemmArgs a;
  a.x = x.ptr<const float>();
  a.ldx = x.stride(0);
  a.w = weight.data;
  a.w_dtype = weight.dtype;
  a.ldw = weight.stride(0);
  a.bias = bias.empty() ? nullptr : bias.ptr<const float>();
  a.y = out.ptr<float>();
  a.ldy = out.stride(0);
  a.rows = x.dim(0);
  a.k = x.dim(1);
  if (!options_.batch_invariant && weight.dtype == DType::kF32 && a.rows >= 16) {
    pool_.parallel_for(n, kMinColsPerThread, 16, [&](std::int64_t b, std::int64_t e) { blas_gemm_f32(a, b, e); });
    return;
  }
  pool_.parallel_for(n, kMinColsPerThread, 16, [&](std::int64_t b, std::int64_t e) { k.gemm(a, b, e); });
}

void CpuBackend::rms_norm(const TensorView& x, const TensorView& weight, float eps, const TensorView& out) {
  if (recorded([=, this] { rms_norm(x, weight, eps, out); })) return;
  const ProfileScope profile(ProfileClass::kNormRopeAct);
  check_f32(x, "rms_norm input");
  check_f32(out, "rms_norm output");
  check_f32(weight, "rms_norm weight");
  const Rows<const float> xr(x);
  const Rows<float> outr(out);
  BATON_CHECK(xr.count() == outr.count() && xr.cols() == outr.cols() && weight.numel() == xr.cols(),
              "rms_norm shapes: x ", x.describe(), ", w ", weight.describe(), ", out ", out.describe());
  const float* w = weight.ptr<const float>();
  const KernelTable& k = *kernels_;
  pool_.parallel_for(xr.count(), min_rows_per_thread(xr.cols()), 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e; ++r) k.rms_norm_row(xr.row(r), w, eps, outr.row(r), xr.cols());
  });
}

void CpuBackend::add_rms_norm(const TensorView& residual, const TensorView& x, const TensorView& weight, float eps,
                              const TensorView& out) {
  if (recorded([=, this] { add_rms_norm(residual, x, weight, eps, out); })) return;
  const ProfileScope profile(ProfileClass::kNormRopeAct);
  check_f32(residual, "add_rms_norm residual");
  check_f32(x, "add_rms_norm input");
  check_f32(out, "add_rms_norm output");
  check_f32(weight, "add_rms_norm weight");
  const Rows<float> rr(residual);
  const Rows<const float> xr(x);
  const Rows<float> outr(out);
  BATON_CHECK(rr.count() == xr.count() && rr.count() == outr.count() && rr.cols() == xr.cols() &&
                  rr.cols() == outr.cols() && weight.numel() == rr.cols(),
              "add_rms_norm shapes: residual ", residual.describe(), ", x ", x.describe(), ", w ", weight.describe(),
              ", out ", out.describe());
  const float* w = weight.ptr<const float>();
  const std::int64_t cols = rr.cols();
  const KernelTable& k = *kernels_;
  pool_.parallel_for(rr.count(), min_rows_per_thread(cols), 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e; ++r) {
      float* res = rr.row(r);
      const float* in = xr.row(r);
      for (std::int64_t i = 0; i < cols; ++i) res[i] = res[i] + in[i];  // add()'s one rounding
      k.rms_norm_row(res, w, eps, outr.row(r), cols);
    }
  });
}

void CpuBackend::silu_mul(const TensorView& gate_up, const TensorView& out) {
  if (recorded([=, this] { silu_mul(gate_up, out); })) return;
  const ProfileScope profile(ProfileClass::kNormRopeAct);
  check_f32(gate_up, "silu_mul input");
  check_f32(out, "silu_mul output");
  const Rows<const float> in(gate_up);
  const Rows<float> o(out);
  BATON_CHECK(in.count() == o.count() && in.cols() == 2 * o.cols(), "silu_mul shapes: ",
              gate_up.describe(), " -> ", out.describe());
  const std::int64_t inter = o.cols();
  const KernelTable& k = *kernels_;
  pool_.parallel_for(in.count(), min_rows_per_thread(in.cols()), 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e; ++r) k.silu_mul_row(in.row(r), in.row(r) + inter, o.row(r), inter);
  });
}

void CpuBackend::argmax_rows(const TensorView& logits, const TensorView& out) {
  if (recorded([=, this] { argmax_rows(logits, out); })) return;
  const ProfileScope profile(ProfileClass::kSampling);
  check_f32(logits, "argmax_rows logits");
  const Rows<const float> rows(logits);
  BATON_CHECK(out.dtype == DType::kI32 && out.ndim == 1 && out.numel() == rows.count() && rows.cols() > 0,
              "argmax_rows shapes: ", logits.describe(), " -> ", out.describe());
  auto* ids = out.ptr<std::int32_t>();
  const auto cols = static_cast<std::size_t>(rows.cols());
  pool_.parallel_for(rows.count(), min_rows_per_thread(rows.cols()), 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e; ++r) {
      const std::span<const float> row(rows.row(r), cols);
      const std::optional<std::size_t> best = argmax_lowest(row);
      ids[r] = !best.has_value()                                     ? kArgmaxHasNaN
               : row[*best] == -std::numeric_limits<float>::infinity() ? kArgmaxNoFinite
                                                                        : static_cast<std::int32_t>(*best);
    }
  });
}

void CpuBackend::sample_rows(const TensorView& logits, std::span<const SampleRowParams> params,
                             const TensorView& out) {
  breaks_capture("sample_rows");
  const ProfileScope profile(ProfileClass::kSampling);
  check_f32(logits, "sample_rows logits");
  const Rows<const float> rows(logits);
  BATON_CHECK(out.dtype == DType::kI32 && out.ndim == 1 && out.numel() == rows.count() && rows.cols() > 0 &&
                  static_cast<std::int64_t>(params.size()) == rows.count(),
              "sample_rows shapes: ", logits.describe(), " with ", params.size(), " params -> ", out.describe());
  auto* ids = out.ptr<std::int32_t>();
  const auto vocab = static_cast<std::size_t>(rows.cols());
  const std::int64_t tasks = std::min<std::int64_t>(rows.count(), pool_.size());
  if (sample_scratch_.size() < static_cast<std::size_t>(tasks)) sample_scratch_.resize(static_cast<std::size_t>(tasks));
  // Task t takes rows t, t + tasks, ...: rows are independent, so no result depends on the split.
  auto task = [&](int t) {
    if (t >= tasks) return;
    SampleScratch& s = sample_scratch_[static_cast<std::size_t>(t)];
    for (std::int64_t r = t; r < rows.count(); r += tasks) {
      const SampleRowParams& p = params[static_cast<std::size_t>(r)];
      if (p.temperature < 0.0f) continue;
      const std::span<const float> row(rows.row(r), vocab);
      if (p.temperature <= 1e-5f) {
        const std::optional<std::size_t> best = argmax_lowest(row);
        ids[r] = !best.has_value()                                            ? kArgmaxHasNaN
                 : row[*best] == -std::numeric_limits<float>::infinity() ? kArgmaxNoFinite
                                                                          : static_cast<std::int32_t>(*best);
        continue;
      }
      s.work.assign(row.begin(), row.end());
      s.probs.resize(vocab);
      const float max_logit = RowSampler::scale_and_max(s.work, p.temperature);
      if (!std::isfinite(max_logit)) {
        // NaN in the row, or x / T overflowed to +inf: no distribution to draw from.
        ids[r] = max_logit == -std::numeric_limits<float>::infinity() ? kArgmaxNoFinite : kArgmaxHasNaN;
        continue;
      }
      s.sampler.distribution(s.work, max_logit, p.top_k, p.top_p, p.min_p, s.probs);
      ids[r] = RowSampler::draw(s.probs, philox_uniform(p.seed, kPhiloxTokenPurpose, p.position, 0));
    }
  };
  if (tasks <= 1) {
    task(0);
  } else {
    pool_.run(task);
  }
}

void CpuBackend::paged_attention(const TensorView& q, const TensorView& kv_cache, const AttentionBatch& batch,
                                 float scale, int sliding_window, const TensorView& out) {
  if (recorded([=, this] { paged_attention(q, kv_cache, batch, scale, sliding_window, out); })) return;
  const ProfileScope profile(ProfileClass::kAttention);
  check_f32(q, "attention q");
  check_f32(out, "attention output");
  BATON_CHECK((kv_cache.dtype == DType::kF32 || kv_cache.dtype == DType::kBF16) && kv_cache.ndim == 5 &&
                  kv_cache.is_contiguous(),
              "kv cache layer must be contiguous F32 or BF16 [blocks, 2, block_size, kv_heads, head_dim]: ",
              kv_cache.describe());
  BATON_CHECK(q.ndim == 3 && out.ndim == 3 && q.stride(2) == 1 && q.stride(1) == q.dim(2) &&
                  out.stride(2) == 1 && out.stride(1) == out.dim(2),
              "attention q/out must be [tokens, heads, head_dim] with contiguous heads: ", q.describe(),
              ", ", out.describe());
  const auto num_heads = static_cast<std::int32_t>(q.dim(1));
  const auto num_kv_heads = static_cast<std::int32_t>(kv_cache.dim(3));
  const auto head_dim = static_cast<std::int32_t>(kv_cache.dim(4));
  BATON_CHECK(q.dim(2) == head_dim && num_heads % num_kv_heads == 0 && out.dim(1) == num_heads &&
                  q.dim(0) == batch.num_tokens && out.dim(0) == batch.num_tokens,
              "attention shapes: q ", q.describe(), ", cache ", kv_cache.describe(), ", out ", out.describe());
  AttentionArgs a;
  a.q = q.ptr<const float>();
  a.q_stride = q.stride(0);
  a.kv_cache = kv_cache.data;
  a.kv_dtype = kv_cache.dtype;
  a.positions = batch.positions.ptr<const std::int32_t>();
  a.token_seq = batch.token_seq.ptr<const std::int32_t>();
  a.block_tables = batch.block_tables.ptr<const std::int32_t>();
  a.block_table_stride = batch.block_tables.stride(0);
  a.out = out.ptr<float>();
  a.out_stride = out.stride(0);
  a.num_heads = num_heads;
  a.num_kv_heads = num_kv_heads;
  a.head_dim = head_dim;
  a.block_size = static_cast<std::int32_t>(kv_cache.dim(2));
  a.sliding_window = sliding_window;
  a.scale = scale;
  // max_context_len is a bound (a graph replays with max_model_len there): the longest context,
  // which sizes the scratch and the work split, is read from the positions, each inside the bound.
  std::int64_t context = 0;
  for (std::int64_t t = 0; t < batch.num_tokens; ++t) {
    BATON_CHECK(a.positions[t] >= 0 && a.positions[t] < batch.max_context_len, "attention: token ", t, " at position ",
                a.positions[t], " is outside the batch's max_context_len ", batch.max_context_len);
    context = std::max<std::int64_t>(context, a.positions[t] + 1);
  }
  const std::int64_t scratch_floats = attention_scratch_floats(num_heads, num_kv_heads, head_dim, context);
  const KernelTable& k = *kernels_;
  a.num_tokens = batch.num_tokens;
  // An item costs about tokens x context x head_dim x group multiply-adds (twice); keep shares worth a wake-up.
  const std::int64_t item_tokens = std::min<std::int64_t>(kAttentionTokenBlock, batch.num_tokens);
  const std::int64_t item_cost =
      std::max<std::int64_t>(1, item_tokens * context * head_dim * (num_heads / num_kv_heads) * 2);
  const std::int64_t min_items = std::max<std::int64_t>(1, (1 << 15) / item_cost);
  pool_.parallel_for(attention_items(batch.num_tokens, num_kv_heads), min_items, 1, [&](std::int64_t b, std::int64_t e) {
    // Per-thread scratch that only grows: no allocation once the longest context has been seen.
    thread_local std::vector<float> scratch;
    if (static_cast<std::int64_t>(scratch.size()) < scratch_floats) scratch.resize(static_cast<std::size_t>(scratch_floats));
    k.attention(a, b, e, scratch.data());
  });
}

}  // namespace baton::cpu

namespace baton {

absl::StatusOr<std::unique_ptr<Backend>> make_cpu_backend(const BackendOptions& options) {
  BATON_ASSIGN_OR_RETURN(auto backend, cpu::CpuBackend::create(options));
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace baton
