#include "kernels/cpu/packed_weights.h"

#include <cstring>

namespace baton::cpu {
namespace {

// w may be unaligned (safetensors data need not start on an element boundary when mapped), so
// its elements are read with memcpy; out is the backend's own, aligned allocation.
template <class T>
void pack_typed(const void* w, std::int64_t n, std::int64_t k, std::int64_t ldw, bool interleave, T* out) {
  std::memset(static_cast<void*>(out), 0, static_cast<std::size_t>(num_panels(n) * panel_elements(k)) * sizeof(T));
  for (std::int64_t col = 0; col < n; ++col) {
    const std::int64_t p = col / kPanelCols, l = col % kPanelCols;
    T* panel = out + p * panel_elements(k);
    const unsigned char* row = static_cast<const unsigned char*>(w) + col * ldw * static_cast<std::int64_t>(sizeof(T));
    for (std::int64_t kk = 0; kk < k; ++kk) {
      const std::int64_t q = kk / 2, e = kk % 2;
      const std::int64_t at = interleave ? 2 * l + e : kPanelCols * e + l;
      std::memcpy(&panel[q * 2 * kPanelCols + at], row + kk * static_cast<std::int64_t>(sizeof(T)), sizeof(T));
    }
  }
}

}  // namespace

void pack_weight(const void* w, DType dtype, std::int64_t n, std::int64_t k, std::int64_t ldw, void* out) {
  if (dtype == DType::kBF16) {
    pack_typed(w, n, k, ldw, /*interleave=*/true, static_cast<std::uint16_t*>(out));
  } else {
    pack_typed(w, n, k, ldw, /*interleave=*/false, static_cast<float*>(out));
  }
}

}  // namespace baton::cpu
