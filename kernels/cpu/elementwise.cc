// CpuBackend ops that move or combine elements without reductions: embedding lookup, RoPE, add, silu_add,
// row gathers and copies, KV-cache writes. Plain loops: each element is rounded once, identically
// on every ISA (the library is built with -ffp-contract=off).
#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/rows.h"
#include "kernels/step_profile.h"

namespace baton::cpu {
namespace {

void widen_row(const void* src, DType dtype, float* dst, std::int64_t n) {
  switch (dtype) {
    case DType::kF32: std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(float)); break;
    case DType::kBF16: {
      const auto* s = static_cast<const std::uint16_t*>(src);
      for (std::int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      break;
    }
    case DType::kF16: {
      const auto* s = static_cast<const std::uint16_t*>(src);
      for (std::int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      break;
    }
    default: BATON_CHECK(false, "cannot widen ", dtype_name(dtype), " to F32");
  }
}

}  // namespace

void CpuBackend::embedding(const TensorView& table, const TensorView& token_ids, const TensorView& out) {
  if (recorded([=, this] { embedding(table, token_ids, out); })) return;
  BATON_CHECK(table.ndim == 2 && table.stride(1) == 1, "embedding table: ", table.describe());
  BATON_CHECK(token_ids.dtype == DType::kI32 && token_ids.ndim == 1, "token ids: ", token_ids.describe());
  const Rows<float> o(out);
  BATON_CHECK(out.dtype == DType::kF32 && o.count() == token_ids.dim(0) && o.cols() == table.dim(1),
              "embedding out ", out.describe(), " for table ", table.describe());
  const auto* ids = token_ids.ptr<const std::int32_t>();
  const std::int64_t vocab = table.dim(0);
  const std::size_t row_bytes = static_cast<std::size_t>(table.stride(0)) * dtype_size(table.dtype);
  for (std::int64_t t = 0; t < o.count(); ++t) {
    BATON_CHECK(ids[t] >= 0 && ids[t] < vocab, "token id ", ids[t], " outside the vocabulary [0, ", vocab, ")");
    widen_row(static_cast<const char*>(table.data) + static_cast<std::size_t>(ids[t]) * row_bytes, table.dtype,
              o.row(t), o.cols());
  }
}

void CpuBackend::rope_cos_sin(const TensorView& positions, const TensorView& inv_freq, const TensorView& cos_sin) {
  if (recorded([=, this] { rope_cos_sin(positions, inv_freq, cos_sin); })) return;
  const ProfileScope profile(ProfileClass::kNormRopeAct);
  BATON_CHECK(positions.dtype == DType::kI32 && inv_freq.dtype == DType::kF32 && cos_sin.dtype == DType::kF32,
              "rope_cos_sin dtypes");
  const std::int64_t half = inv_freq.numel();
  const Rows<float> cs(cos_sin);
  BATON_CHECK(cs.count() == positions.numel() && cs.cols() == 2 * half, "rope_cos_sin shapes: ",
              cos_sin.describe(), " for ", positions.numel(), " positions and ", half, " frequencies");
  const auto* pos = positions.ptr<const std::int32_t>();
  const auto* f = inv_freq.ptr<const float>();
  for (std::int64_t t = 0; t < cs.count(); ++t) {
    float* row = cs.row(t);
    for (std::int64_t i = 0; i < half; ++i) {
      // The angle is rounded to f32 first, as the reference implementations compute it.
      const float angle = static_cast<float>(pos[t]) * f[i];
      row[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      row[half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
}

void CpuBackend::apply_rope(const TensorView& x, const TensorView& cos_sin) {
  if (recorded([=, this] { apply_rope(x, cos_sin); })) return;
  const ProfileScope profile(ProfileClass::kNormRopeAct);
  BATON_CHECK(x.dtype == DType::kF32 && x.ndim == 3 && x.stride(2) == 1, "rope input: ", x.describe());
  const std::int64_t tokens = x.dim(0), heads = x.dim(1), hd = x.dim(2), half = hd / 2;
  const Rows<const float> cs(cos_sin);
  BATON_CHECK(hd % 2 == 0 && cs.count() == tokens && cs.cols() == hd, "rope shapes: x ", x.describe(),
              ", cos_sin ", cos_sin.describe());
  pool_.parallel_for(tokens, min_rows_per_thread(heads * hd), 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t t = b; t < e; ++t) {
      const float* c = cs.row(t);
      const float* s = c + half;
      for (std::int64_t h = 0; h < heads; ++h) {
        float* v = x.ptr<float>() + t * x.stride(0) + h * x.stride(1);
        for (std::int64_t i = 0; i < half; ++i) {
          const float a = v[i], b2 = v[i + half];
          v[i] = a * c[i] - b2 * s[i];
          v[i + half] = b2 * c[i] + a * s[i];
        }
      }
    }
  });
}

void CpuBackend::add(const TensorView& a, const TensorView& b, const TensorView& out) {
  if (recorded([=, this] { add(a, b, out); })) return;
  const ProfileScope profile(ProfileClass::kNormRopeAct);
  const Rows<const float> ar(a), br(b);
  const Rows<float> o(out);
  BATON_CHECK(a.dtype == DType::kF32 && b.dtype == DType::kF32 && out.dtype == DType::kF32 &&
                  ar.count() == o.count() && br.count() == o.count() && ar.cols() == o.cols() &&
                  br.cols() == o.cols(),
              "add shapes: ", a.describe(), " + ", b.describe(), " -> ", out.describe());
  pool_.parallel_for(o.count(), min_rows_per_thread(o.cols()), 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      const float* x = ar.row(r);
      const float* y = br.row(r);
      float* z = o.row(r);
      for (std::int64_t i = 0; i < o.cols(); ++i) z[i] = x[i] + y[i];
    }
  });
}

void CpuBackend::silu_add(const TensorView& x, const TensorView& residual, const TensorView& out) {
  if (recorded([=, this] { silu_add(x, residual, out); })) return;
  const ProfileScope profile(ProfileClass::kNormRopeAct);
  const Rows<const float> xr(x), rr(residual);
  const Rows<float> o(out);
  BATON_CHECK(x.dtype == DType::kF32 && residual.dtype == DType::kF32 && out.dtype == DType::kF32 &&
                  xr.count() == o.count() && rr.count() == o.count() && xr.cols() == o.cols() &&
                  rr.cols() == o.cols(),
              "silu_add shapes: silu(", x.describe(), ") + ", residual.describe(), " -> ", out.describe());
  // std::exp per element: only Medusa's small [sequences, hidden] blocks run this, so it is not
  // worth a vectorised kernel-table entry.
  pool_.parallel_for(o.count(), min_rows_per_thread(o.cols()), 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      const float* v = xr.row(r);
      const float* res = rr.row(r);
      float* z = o.row(r);
      for (std::int64_t i = 0; i < o.cols(); ++i) z[i] = res[i] + v[i] / (1.0f + std::exp(-v[i]));
    }
  });
}

void CpuBackend::gather_rows(const TensorView& src, const TensorView& indices, const TensorView& out) {
  if (recorded([=, this] { gather_rows(src, indices, out); })) return;
  const Rows<const float> s(src);
  const Rows<float> o(out);
  BATON_CHECK(src.dtype == DType::kF32 && out.dtype == DType::kF32 && indices.dtype == DType::kI32 &&
                  indices.numel() == o.count() && s.cols() == o.cols(),
              "gather_rows shapes: ", src.describe(), " by ", indices.describe(), " -> ", out.describe());
  const auto* idx = indices.ptr<const std::int32_t>();
  for (std::int64_t r = 0; r < o.count(); ++r) {
    BATON_CHECK(idx[r] >= 0 && idx[r] < s.count(), "gather index ", idx[r], " outside [0, ", s.count(), ")");
    std::memcpy(o.row(r), s.row(idx[r]), static_cast<std::size_t>(o.cols()) * sizeof(float));
  }
}

void CpuBackend::copy(const TensorView& src, const TensorView& out) {
  if (recorded([=, this] { copy(src, out); })) return;
  const Rows<const float> s(src);
  const Rows<float> o(out);
  BATON_CHECK(src.dtype == out.dtype && src.dtype == DType::kF32 && s.count() == o.count() && s.cols() == o.cols(),
              "copy shapes: ", src.describe(), " -> ", out.describe());
  for (std::int64_t r = 0; r < o.count(); ++r) {
    std::memmove(o.row(r), s.row(r), static_cast<std::size_t>(o.cols()) * sizeof(float));
  }
}

void CpuBackend::write_kv(const TensorView& k, const TensorView& v, const TensorView& slot_mapping,
                          const TensorView& kv_cache) {
  if (recorded([=, this] { write_kv(k, v, slot_mapping, kv_cache); })) return;
  const ProfileScope profile(ProfileClass::kAttention);
  BATON_CHECK((kv_cache.dtype == DType::kF32 || kv_cache.dtype == DType::kBF16) && kv_cache.ndim == 5 &&
                  kv_cache.is_contiguous(),
              "kv cache layer must be contiguous F32 or BF16 [blocks, 2, block_size, kv_heads, head_dim]: ",
              kv_cache.describe());
  const std::int64_t num_blocks = kv_cache.dim(0), block_size = kv_cache.dim(2);
  const std::int64_t row = kv_cache.dim(3) * kv_cache.dim(4);  // kv_heads * head_dim
  BATON_CHECK(k.ndim == 3 && v.ndim == 3 && k.dim(1) * k.dim(2) == row && v.dim(1) * v.dim(2) == row &&
                  k.stride(2) == 1 && k.stride(1) == k.dim(2) && v.stride(2) == 1 && v.stride(1) == v.dim(2) &&
                  k.dim(0) == slot_mapping.numel() && v.dim(0) == slot_mapping.numel(),
              "write_kv shapes: k ", k.describe(), ", v ", v.describe(), ", cache ", kv_cache.describe());
  const auto* slots = slot_mapping.ptr<const std::int32_t>();
  const bool bf16 = kv_cache.dtype == DType::kBF16;
  for (std::int64_t t = 0; t < k.dim(0); ++t) {
    const std::int64_t slot = slots[t];
    if (slot < 0) continue;
    const std::int64_t block = slot / block_size, offset = slot % block_size;
    BATON_CHECK(block < num_blocks, "slot ", slot, " beyond ", num_blocks, " blocks");
    const std::int64_t kdst = ((block * 2 + 0) * block_size + offset) * row;  // elements into the layer
    const std::int64_t vdst = ((block * 2 + 1) * block_size + offset) * row;
    const float* ksrc = k.ptr<const float>() + t * k.stride(0);
    const float* vsrc = v.ptr<const float>() + t * v.stride(0);
    if (bf16) {
      // Rounded to nearest even, as the weights' BF16 is: the cache keeps the rounded values.
      auto* cache = kv_cache.ptr<std::uint16_t>();
      for (std::int64_t i = 0; i < row; ++i) {
        cache[kdst + i] = f32_to_bf16(ksrc[i]);
        cache[vdst + i] = f32_to_bf16(vsrc[i]);
      }
    } else {
      auto* cache = kv_cache.ptr<float>();
      std::memcpy(cache + kdst, ksrc, static_cast<std::size_t>(row) * sizeof(float));
      std::memcpy(cache + vdst, vsrc, static_cast<std::size_t>(row) * sizeof(float));
    }
  }
}

}  // namespace baton::cpu
