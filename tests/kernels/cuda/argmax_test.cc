// The CUDA argmax_rows() against its CPU twin on the rows of tests/kernels/argmax_cases.h: the
// same ids exactly (comparisons only), for vocabularies below, at and far above the block's 256
// threads, including Llama 3's 128256.
#include <vector>

#include "tests/kernels/argmax_cases.h"
#include "tests/kernels/cuda/twin_test_util.h"

namespace baton::cuda_testing {
namespace {

TEST(CudaArgmax, SameIdsAsTheCpu) {
  SKIP_WITHOUT_GPU();
  Twin twin;
  for (const auto& [rows, vocab] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {8, 1}, {16, 31}, {16, 256}, {16, 257}, {24, 4096}, {16, 32003}, {16, 128256}}) {
    const testing::ArgmaxCase c = testing::argmax_case(rows, vocab, static_cast<std::uint32_t>(vocab));
    const TensorView logits = twin.upload(c.logits, DType::kF32, {rows, vocab});
    const TensorView ids = twin.empty(static_cast<std::size_t>(rows) * sizeof(std::int32_t), DType::kI32, {rows});
    twin.gpu().argmax_rows(logits, ids);
    const std::vector<std::int32_t> gpu = twin.download<std::int32_t>(ids, static_cast<std::size_t>(rows));
    std::vector<std::int32_t> cpu(static_cast<std::size_t>(rows));
    twin.cpu().argmax_rows(TensorView::contiguous(const_cast<float*>(c.logits.data()), DType::kF32, {rows, vocab}),
                           TensorView::contiguous(cpu.data(), DType::kI32, {rows}));
    for (std::int64_t r = 0; r < rows; ++r) {
      ASSERT_EQ(gpu[static_cast<std::size_t>(r)], cpu[static_cast<std::size_t>(r)]) << "row " << r << " of " << rows
                                                                                     << " x " << vocab;
      ASSERT_EQ(cpu[static_cast<std::size_t>(r)], testing::reference_argmax(c.logits.data() + r * vocab, vocab));
    }
  }
}

}  // namespace
}  // namespace baton::cuda_testing
