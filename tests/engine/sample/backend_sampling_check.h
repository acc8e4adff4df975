// The check that a backend's sample_rows() draws the host Sampler's tokens, shared by the CPU
// backend's test and its CUDA twin: the same token for every row, over temperature, top-k (ties at
// the k-th value), top-p (cuts inside runs of tied logits), min-p and their mixes, for
// vocabularies from 7 to Llama 3's 128256, with greedy rows among them; and the codes of rows that
// have no token.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "engine/sample/random.h"
#include "engine/sample/sampler.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"

namespace baton::testing {

struct Case {
  SamplingParams params;
  const char* name;
};

inline std::vector<Case> sampling_cases() {
  auto p = [](float t, int k, float top_p, float min_p) {
    SamplingParams s;
    s.temperature = t;
    s.top_k = k;
    s.top_p = top_p;
    s.min_p = min_p;
    return s;
  };
  return {{p(0.7f, 0, 1.0f, 0.0f), "temperature"},       {p(1.0f, 50, 1.0f, 0.0f), "top_k"},
          {p(0.9f, 0, 0.9f, 0.0f), "top_p"},             {p(1.0f, 0, 1.0f, 0.1f), "min_p"},
          {p(1.2f, 200, 0.8f, 0.05f), "all"},            {p(0.5f, 1, 1.0f, 0.0f), "top_k_1"},
          {p(1.0f, 0, 0.01f, 0.0f), "top_p_tiny"},       {p(1.5f, 7, 0.95f, 0.0f), "top_k_top_p"},
          {p(0.0f, 0, 1.0f, 0.0f), "greedy"}};
}

// Random rows, and rows of few distinct values (many exact ties, so top-k and top-p cut inside
// runs of equal logits).
inline std::vector<float> sampling_rows(std::int64_t rows, std::int64_t vocab, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.5f);
  std::vector<float> x(static_cast<std::size_t>(rows * vocab));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t i = 0; i < vocab; ++i) {
      const float v = normal(rng);
      x[static_cast<std::size_t>(r * vocab + i)] = r % 2 == 0 ? v : std::round(v);
    }
  }
  return x;
}

inline void expect_samples_like_the_host(Backend& backend) {
  ASSERT_TRUE(backend.samples_rows());
  Sampler host;
  constexpr std::int64_t kRows = 24;
  for (const std::int64_t vocab : {7, 1000, 32003, 128256}) {
    const std::vector<float> logits = sampling_rows(kRows, vocab, static_cast<std::uint32_t>(vocab));
    auto d_logits = backend.allocate(logits.size() * sizeof(float));
    auto d_ids = backend.allocate(kRows * sizeof(std::int32_t));
    ASSERT_TRUE(d_logits.ok() && d_ids.ok());
    backend.copy_to_device(d_logits->data(), logits.data(), logits.size() * sizeof(float));
    for (const Case& c : sampling_cases()) {
      std::vector<SampleRowParams> params(kRows);
      for (std::int64_t r = 0; r < kRows; ++r) {
        SampleRowParams& p = params[static_cast<std::size_t>(r)];
        p.temperature = c.params.greedy() ? 0.0f : c.params.temperature;
        p.top_k = c.params.top_k;
        p.top_p = c.params.top_p;
        p.min_p = c.params.min_p;
        p.seed = 1000u + static_cast<std::uint64_t>(r) * 7919u;
        p.position = 17 + r;
      }
      backend.sample_rows(d_logits->view(DType::kF32, {kRows, vocab}), params, d_ids->view(DType::kI32, {kRows}));
      std::vector<std::int32_t> ids(kRows);
      backend.copy_to_host(ids.data(), d_ids->data(), ids.size() * sizeof(std::int32_t));
      for (std::int64_t r = 0; r < kRows; ++r) {
        const SampleRowParams& p = params[static_cast<std::size_t>(r)];
        RandomStream rng = token_stream(p.seed, p.position);
        const std::span<const float> row(logits.data() + r * vocab, static_cast<std::size_t>(vocab));
        const std::int32_t want = host.sample(row, c.params, TokenHistory{}, {}, rng).token;
        EXPECT_EQ(ids[static_cast<std::size_t>(r)], want) << c.name << ", vocab " << vocab << ", row " << r;
      }
    }
  }
}

// Rows without a token get argmax_rows()' codes (NaN; all -inf; a sampled row whose max is +inf
// after temperature), a greedy row's +inf is its pick, and a skipped row's id is left alone.
inline void expect_bad_rows_coded(Backend& backend) {
  const std::int64_t vocab = 300, rows = 6;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::vector<float> logits = sampling_rows(rows, vocab, 5);
  auto row = [&](std::int64_t r) { return logits.begin() + r * vocab; };
  row(1)[123] = std::numeric_limits<float>::quiet_NaN();
  std::fill(row(2), row(3), -kInf);
  row(4)[77] = kInf;  // sampled: no distribution to draw from
  row(5)[88] = kInf;  // greedy: the pick
  std::vector<SampleRowParams> params(static_cast<std::size_t>(rows));
  for (auto& p : params) p.temperature = 0.8f;
  params[3].temperature = -1.0f;  // skipped
  params[5].temperature = 0.0f;
  auto d_logits = backend.allocate(logits.size() * sizeof(float));
  auto d_ids = backend.allocate(static_cast<std::size_t>(rows) * sizeof(std::int32_t));
  ASSERT_TRUE(d_logits.ok() && d_ids.ok());
  backend.copy_to_device(d_logits->data(), logits.data(), logits.size() * sizeof(float));
  std::vector<std::int32_t> ids(static_cast<std::size_t>(rows), -7);
  backend.copy_to_device(d_ids->data(), ids.data(), ids.size() * sizeof(std::int32_t));
  backend.sample_rows(d_logits->view(DType::kF32, {rows, vocab}), params, d_ids->view(DType::kI32, {rows}));
  backend.copy_to_host(ids.data(), d_ids->data(), ids.size() * sizeof(std::int32_t));
  EXPECT_GE(ids[0], 0);
  EXPECT_LT(ids[0], vocab);
  EXPECT_EQ(ids[1], kArgmaxHasNaN);
  EXPECT_EQ(ids[2], kArgmaxNoFinite);
  EXPECT_EQ(ids[3], -7);
  EXPECT_EQ(ids[4], kArgmaxHasNaN);
  EXPECT_EQ(ids[5], 88);
}

}  // namespace baton::testing
