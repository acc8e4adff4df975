// CpuBackend: the Backend on the host CPU. f32 activations; weights in F32, BF16 or F16 read in
// place; work split over the one ThreadPool; kernels from the best ISA tier the CPU supports.
//
// linear() weights packed at load (pack_linear_weight: F32 and BF16, see packed_weights.h) go
// through the register-blocked GEMM; the backend remembers which buffers hold packed weights until
// they are freed. Other weights use the dot-product GEMM in place. Memory comes from host_memory.h:
// huge pages for big buffers, and small packed weights side by side in shared huge-page slabs.
//
// With batch_invariant (the default) every op uses the V16 kernels whose per-row reduction order is
// fixed. batch_invariant = false lets F32 GEMMs with many rows go through OpenBLAS (faster
// prefill, but a row's bits then depend on the batch: never use it with speculative decoding's
// token-identical guarantee in mind).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_graph.h"
#include "kernels/cpu/host_memory.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/row_sampler.h"
#include "kernels/cpu/thread_pool.h"

namespace baton::cpu {

class CpuBackend final : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<CpuBackend>> create(const BackendOptions& options);

  Device device() const override { return Device{DeviceType::kCpu, 0}; }
  std::string describe() const override;
  DType activation_dtype() const override { return DType::kF32; }
  // F32, or BF16 (half the memory; values rounded as they are stored).
  bool supports_kv_cache_dtype(DType dtype) const override { return dtype == DType::kF32 || dtype == DType::kBF16; }

  absl::StatusOr<DeviceBuffer> allocate(std::size_t bytes) override;
  // Staging memory is host memory like the rest: large buffers (a KV pool's host mirror in the
  // discrete-memory test mode) are committed at allocation, as the KV pools are.
  absl::StatusOr<DeviceBuffer> allocate_staging(std::size_t bytes) override;
  void copy_to_device(void* dst, const void* host_src, std::size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, std::size_t bytes) override;
  void copy_on_device(void* dst, const void* src, std::size_t bytes) override;
  bool reads_host_memory() const override { return !options_.cpu_discrete_memory; }
  bool host_reads_device_memory() const override { return !options_.cpu_discrete_memory; }
  absl::StatusOr<DeviceBuffer> pack_linear_weight(const TensorView& weight, TensorView* packed) override;
  void synchronize() override { breaks_capture("synchronize"); }
  std::uint64_t fence() override {
    breaks_capture("fence");
    return 0;
  }
  void wait_for(std::uint64_t /*fence*/) override { breaks_capture("wait_for"); }

  void embedding(const TensorView& table, const TensorView& token_ids, const TensorView& out) override;
  void rms_norm(const TensorView& x, const TensorView& weight, float eps, const TensorView& out) override;
  void add_rms_norm(const TensorView& residual, const TensorView& x, const TensorView& weight, float eps,
                    const TensorView& out) override;
  void linear(const TensorView& x, const TensorView& weight, const TensorView& bias,
              const TensorView& out) override;
  void rope_cos_sin(const TensorView& positions, const TensorView& inv_freq, const TensorView& cos_sin) override;
  void apply_rope(const TensorView& x, const TensorView& cos_sin) override;
  void silu_mul(const TensorView& gate_up, const TensorView& out) override;
  void add(const TensorView& a, const TensorView& b, const TensorView& out) override;
  void silu_add(const TensorView& x, const TensorView& residual, const TensorView& out) override;
  void gather_rows(const TensorView& src, const TensorView& indices, const TensorView& out) override;
  void copy(const TensorView& src, const TensorView& out) override;
  void write_kv(const TensorView& k, const TensorView& v, const TensorView& slot_mapping,
                const TensorView& kv_cache) override;
  void paged_attention(const TensorView& q, const TensorView& kv_cache, const AttentionBatch& batch,
                       float scale, int sliding_window, const TensorView& out) override;
  void argmax_rows(const TensorView& logits, const TensorView& out) override;
  bool runs_moe() const override { return true; }
  void moe(const TensorView& x, const TensorView& router_logits, const MoeExperts& experts, const MoeScratch& scratch,
           const TensorView& out) override;  // moe.cc
  bool runs_linear_attention() const override { return true; }
  // linear_attention.cc:
  void sigmoid_mul(const TensorView& x, const TensorView& gate, const TensorView& out) override;
  void causal_conv1d(const TensorView& x, const TensorView& weight, const TensorView& bias, const TensorView& state,
                     const RecurrentBatch& batch, const TensorView& out) override;
  void gated_delta_rule(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& b,
                        const TensorView& a, const TensorView& a_log, const TensorView& dt_bias,
                        const TensorView& state, const RecurrentBatch& batch, const TensorView& out) override;
  void gated_rms_norm(const TensorView& x, const TensorView& gate, const TensorView& weight, float eps,
                      const TensorView& out) override;
  bool runs_mamba2() const override { return true; }
  // mamba2.cc:
  void relu_squared(const TensorView& x, const TensorView& out) override;
  void ssd_recurrence(const TensorView& x, const TensorView& dt_in, const TensorView& b, const TensorView& c,
                      const TensorView& a_log, const TensorView& dt_bias, const TensorView& d, float dt_min,
                      float dt_max, const TensorView& state, const RecurrentBatch& batch, const TensorView& out) override;
  void gated_group_rms_norm(const TensorView& x, const TensorView& gate, const TensorView& weight,
                            std::int64_t group_size, float eps, const TensorView& out) override;
  bool samples_rows() const override { return true; }
  void sample_rows(const TensorView& logits, std::span<const SampleRowParams> params, const TensorView& out) override;

  // Graphs of recorded ops (cpu_graph.h): no faster here, but the engine's graph path runs as on a GPU.
  bool captures_graphs() const override { return true; }
  absl::Status begin_capture() override;
  absl::StatusOr<std::unique_ptr<OpGraph>> end_capture() override;

  ThreadPool& pool() { return pool_; }
  const KernelTable& kernels() const { return *kernels_; }
  CpuIsa isa() const { return isa_; }

 protected:
  void free(void* data, std::size_t bytes) override;
  void free_staging(void* data, std::size_t bytes) override;

 private:
  CpuBackend(const BackendOptions& options, CpuIsa isa, const CpuFeatures& features);

  struct PackedWeight {
    DType dtype;
    std::int64_t n, k;
  };
  // While this thread captures a graph on this backend: stores `op` (the call again, its arguments
  // copied) to run at replay instead of now, and returns true.
  template <class Op>
  bool recorded(Op&& op) {
    CpuCapture* c = t_cpu_capture;
    if (c == nullptr || c->backend != this) [[likely]] return false;
    c->ops.emplace_back(std::forward<Op>(op));
    return true;
  }
  // A call no graph can hold (memory, host synchronisation): while this thread captures on this
  // backend, remembers it so that end_capture() fails naming it, and returns true. The call itself
  // still runs.
  bool breaks_capture(const char* call) const;

  // The packed weight starting at `data`, if linear() should read it as packed.
  std::optional<PackedWeight> find_packed(const void* data) const;

  BackendOptions options_;
  CpuIsa isa_;
  CpuFeatures features_;
  const KernelTable* kernels_;
  ThreadPool pool_;
  WeightSlabs weight_slabs_;  // small packed weights
  mutable std::mutex packed_mu_;
  std::unordered_map<const void*, PackedWeight> packed_;  // buffer start -> what it holds
  // sample_rows()' scratch, one per pool task (grown to the vocabulary on first use).
  struct SampleScratch {
    RowSampler sampler;
    std::vector<float> work, probs;
  };
  std::vector<SampleScratch> sample_scratch_;
};

const KernelTable& kernel_table_for(CpuIsa isa);

// OpenBLAS sgemm for output columns [n_begin, n_end) of an F32 GEMM (the non-invariant opt-in).
void blas_gemm_f32(const GemmArgs& a, std::int64_t n_begin, std::int64_t n_end);
void blas_init_single_threaded();

}  // namespace baton::cpu
