// The CPU backend's argmax_rows() against a plain scan: lowest index on ties, -0 == +0, NaN and
// all -inf rows answered with their codes, strided rows, and rows split across the thread pool.
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/kernels/argmax_cases.h"

namespace baton::cpu {
namespace {

TEST(ArgmaxRows, MatchesAPlainScan) {
  BackendOptions o;
  o.num_threads = 2;
  auto backend = CpuBackend::create(o);
  ASSERT_TRUE(backend.ok()) << backend.status();
  // Vocabularies around the 16-lane blocks, and enough rows of a large one to use both threads.
  for (const auto& [rows, vocab] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {8, 1}, {16, 15}, {16, 16}, {16, 17}, {24, 100}, {16, 4096}, {40, 32003}}) {
    const testing::ArgmaxCase c = testing::argmax_case(rows, vocab, static_cast<std::uint32_t>(vocab));
    std::vector<std::int32_t> ids(static_cast<std::size_t>(rows), 12345);
    (*backend)->argmax_rows(TensorView::contiguous(const_cast<float*>(c.logits.data()), DType::kF32, {rows, vocab}),
                            TensorView::contiguous(ids.data(), DType::kI32, {rows}));
    for (std::int64_t r = 0; r < rows; ++r) {
      ASSERT_EQ(ids[static_cast<std::size_t>(r)], testing::reference_argmax(c.logits.data() + r * vocab, vocab))
          << "row " << r << " of " << rows << " x " << vocab;
    }
  }
}

TEST(ArgmaxRows, ReadsStridedRowsOnly) {
  BackendOptions o;
  o.num_threads = 1;
  auto backend = CpuBackend::create(o);
  ASSERT_TRUE(backend.ok()) << backend.status();
  // Every other row of a [16, 2 * 33] buffer; the rows in between hold larger values and a NaN,
  // which a kernel reading past its row would pick up.
  const std::int64_t rows = 16, vocab = 33;
  const testing::ArgmaxCase c = testing::argmax_case(rows, vocab, 7);
  std::vector<float> buffer(static_cast<std::size_t>(rows * 2 * vocab), 1e38f);
  for (std::int64_t r = 0; r < rows; ++r) {
    std::copy_n(c.logits.begin() + r * vocab, vocab, buffer.begin() + r * 2 * vocab);
    buffer[static_cast<std::size_t>(r * 2 * vocab + vocab + 3)] = std::numeric_limits<float>::quiet_NaN();
  }
  TensorView view = TensorView::contiguous(buffer.data(), DType::kF32, {rows, vocab});
  view.strides[0] = 2 * vocab;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(rows));
  (*backend)->argmax_rows(view, TensorView::contiguous(ids.data(), DType::kI32, {rows}));
  for (std::int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(ids[static_cast<std::size_t>(r)], testing::reference_argmax(c.logits.data() + r * vocab, vocab)) << r;
  }
}

}  // namespace
}  // namespace baton::cpu
