// Rows of logits that corner a greedy pick, shared by the CPU argmax test and its CUDA twin: ties
// between distant entries (the lowest index must win, whichever thread or lane saw it), -0 against
// +0, +inf, NaN anywhere, rows of -inf, and the plain random rows real logits look like.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/backend.h"

namespace baton::testing {

struct ArgmaxCase {
  std::int64_t rows = 0;
  std::int64_t vocab = 0;
  std::vector<float> logits;  // [rows, vocab]
};

// What argmax_rows() must answer for one row, by a plain scan.
inline std::int32_t reference_argmax(const float* row, std::int64_t vocab) {
  std::int64_t best = 0;
  for (std::int64_t i = 0; i < vocab; ++i) {
    if (row[i] != row[i]) return kArgmaxHasNaN;
    if (row[i] > row[best]) best = i;
  }
  return row[best] == -std::numeric_limits<float>::infinity() ? kArgmaxNoFinite : static_cast<std::int32_t>(best);
}

// Row r's shape of trouble is r % 8; positions are spread so that ties fall in different lanes,
// vector blocks and (on a GPU) threads and warps.
inline ArgmaxCase argmax_case(std::int64_t rows, std::int64_t vocab, std::uint32_t seed) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  ArgmaxCase c{rows, vocab, std::vector<float>(static_cast<std::size_t>(rows * vocab))};
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<std::int64_t> pos(0, vocab - 1);
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = c.logits.data() + r * vocab;
    for (std::int64_t i = 0; i < vocab; ++i) row[i] = normal(rng);
    const std::int64_t a = pos(rng), b = pos(rng), lo = std::min(a, b), hi = std::max(a, b);
    switch (r % 8) {
      case 0: break;                                        // random
      case 1: row[lo] = row[hi] = 100.0f; break;            // a tie: lo wins
      case 2:                                               // all equal: index 0 wins
        for (std::int64_t i = 0; i < vocab; ++i) row[i] = 1.5f;
        break;
      case 3:                                               // -0 and +0 tie as the maximum
        for (std::int64_t i = 0; i < vocab; ++i) row[i] = -std::abs(row[i]) - 1.0f;
        row[lo] = -0.0f;
        row[hi] = 0.0f;
        break;
      case 4: row[hi] = kInf; row[lo] = 50.0f; break;       // +inf wins
      case 5: row[hi] = std::numeric_limits<float>::quiet_NaN(); break;  // NaN anywhere
      case 6:                                               // no finite entry
        for (std::int64_t i = 0; i < vocab; ++i) row[i] = -kInf;
        break;
      case 7:                                               // one finite entry among -inf
        for (std::int64_t i = 0; i < vocab; ++i) row[i] = -kInf;
        row[hi] = -1e30f;
        break;
    }
  }
  return c;
}

}  // namespace baton::testing
