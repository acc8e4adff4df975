#include "kernels/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <thread>

#include "common/status.h"
#include "kernels/cuda/argmax.cuh"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/device_binding.h"
#include "kernels/cuda/fence_ring.h"
#include "kernels/cuda/sampling.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/moe_ops.h"
#include "kernels/cuda/pointwise.cuh"
#include "kernels/cuda/recurrent_ops.h"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/tensor_args.h"

namespace baton {
namespace {

cuda::KvCacheArg kv_cache_arg(const TensorView& kv) {
  BATON_CHECK((kv.dtype == DType::kF32 || kv.dtype == DType::kBF16) && kv.ndim == 5 && kv.is_contiguous() &&
                  kv.dim(1) == 2,
              "KV cache layer must be contiguous F32 or BF16 [num_blocks, 2, block_size, kv_heads, head_dim]: ",
              kv.describe());
  cuda::KvCacheArg a;
  a.data = kv.data;
  a.type = kv.dtype == DType::kBF16 ? cuda::KvType::kBF16 : cuda::KvType::kF32;
  a.num_blocks = kv.dim(0);
  a.block_size = static_cast<int>(kv.dim(2));
  a.kv_heads = static_cast<int>(kv.dim(3));
  a.head_dim = static_cast<int>(kv.dim(4));
  return a;
}

// The CUDA runtime's current-device calls, for DeviceBinding.
cuda::DeviceRuntime cuda_runtime() {
  return cuda::DeviceRuntime{[](int* device) { return static_cast<int>(cudaGetDevice(device)); },
                             [](int device) { return static_cast<int>(cudaSetDevice(device)); }};
}

// sample_rows() hands SampleRowParams to the kernel as cuda::SampleRowArgs.
static_assert(sizeof(SampleRowParams) == sizeof(cuda::SampleRowArgs) &&
              offsetof(SampleRowParams, temperature) == offsetof(cuda::SampleRowArgs, temperature) &&
              offsetof(SampleRowParams, top_k) == offsetof(cuda::SampleRowArgs, top_k) &&
              offsetof(SampleRowParams, top_p) == offsetof(cuda::SampleRowArgs, top_p) &&
              offsetof(SampleRowParams, min_p) == offsetof(cuda::SampleRowArgs, min_p) &&
              offsetof(SampleRowParams, seed) == offsetof(cuda::SampleRowArgs, seed) &&
              offsetof(SampleRowParams, position) == offsetof(cuda::SampleRowArgs, position));

// A captured CUDA graph, replayed on the backend's stream.
class CudaOpGraph final : public OpGraph {
 public:
  CudaOpGraph(cudaGraphExec_t exec, cudaStream_t stream, const cuda::DeviceBinding& binding)
      : exec_(exec), stream_(stream), binding_(binding) {}
  ~CudaOpGraph() override {
    binding_.bind();
    cudaGraphExecDestroy(exec_);
  }
  CudaOpGraph(const CudaOpGraph&) = delete;
  CudaOpGraph& operator=(const CudaOpGraph&) = delete;
  void replay() override {
    check_cuda(static_cast<cudaError_t>(binding_.bind()), "set device");
    check_cuda(cudaGraphLaunch(exec_, stream_), "graph replay");
  }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
  const cuda::DeviceBinding& binding_;  // the backend's, which outlives its graphs
};

class CudaBackend final : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<CudaBackend>> create(const BackendOptions& options) {
    const int count = cuda_device_count();
    if (options.device.index >= count) {
      return absl::FailedPreconditionError(str_cat("device ", device_name(options.device), ": this machine has ", count,
                                                   " CUDA device(s)"));
    }
    std::unique_ptr<CudaBackend> b(new CudaBackend(options));
    cudaError_t err = static_cast<cudaError_t>(b->binding_.bind());
    if (err == cudaSuccess) err = cudaStreamCreateWithFlags(&b->stream_, cudaStreamNonBlocking);
    if (err != cudaSuccess) {
      return absl::InternalError(str_cat("device ", device_name(options.device), ": ", cudaGetErrorString(err)));
    }
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, options.device.index) == cudaSuccess) {
      b->name_ = str_cat(prop.name, ", sm_", prop.major, prop.minor, ", ", prop.totalGlobalMem >> 30, " GiB");
    }
    // The attention's split-mode scratch (attention.cuh), made once so that graphs keep its address.
    auto workspace = b->allocate(kAttentionWorkspaceBytes);
    if (!workspace.ok()) return workspace.status();
    b->attention_workspace_ = std::move(*workspace);
    std::string error;
    b->gemm_ = cuda::gemm_create(b->stream_, !options.batch_invariant, &error);
    if (b->gemm_ == nullptr) return absl::InternalError(str_cat("device ", device_name(options.device), ": ", error));
    return b;
  }

  ~CudaBackend() override {
    binding_.bind();
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    if (copy_stream_ != nullptr) {
      cudaStreamSynchronize(copy_stream_);
      cudaStreamDestroy(copy_stream_);
      cudaEventDestroy(copy_after_);
    }
    sample_params_ = DeviceBuffer();
    attention_workspace_ = DeviceBuffer();
    moe_.clear();
    for (const auto& ring : events_) {
      for (cudaEvent_t e : ring) {
        if (e != nullptr) cudaEventDestroy(e);
      }
    }
    if (gemm_ != nullptr) cuda::gemm_destroy(gemm_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  Device device() const override { return options_.device; }
  std::string describe() const override {
    return str_cat(device_name(options_.device), " (", name_, options_.batch_invariant ? ", batch-invariant" : "", ")");
  }
  DType activation_dtype() const override { return DType::kF32; }
  bool supports_kv_cache_dtype(DType dtype) const override { return dtype == DType::kF32 || dtype == DType::kBF16; }

  absl::StatusOr<DeviceBuffer> allocate(std::size_t bytes) override {
    on_device();
    if (breaks_capture("allocate")) return absl::FailedPreconditionError("allocate() inside a graph capture");
    if (bytes == 0) bytes = 1;
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes);
    if (err != cudaSuccess) {
      cudaGetLastError();  // clear the (non-sticky) allocation error
      return absl::ResourceExhaustedError(str_cat("device ", device_name(options_.device), ": cannot allocate ", bytes,
                                                  " bytes: ", cudaGetErrorString(err)));
    }
    return DeviceBuffer(this, p, bytes);
  }
  absl::StatusOr<DeviceBuffer> allocate_staging(std::size_t bytes) override {
    on_device();
    if (breaks_capture("allocate_staging")) {
      return absl::FailedPreconditionError("allocate_staging() inside a graph capture");
    }
    void* p = nullptr;
    const cudaError_t err = cudaMallocHost(&p, std::max<std::size_t>(bytes, 1));
    if (err != cudaSuccess) {
      cudaGetLastError();
      return absl::ResourceExhaustedError(str_cat("cannot allocate ", bytes, " bytes of page-locked host memory: ",
                                                  cudaGetErrorString(err)));
    }
    return DeviceBuffer(this, p, bytes, /*staging=*/true);
  }
  // Fences are events recorded on a stream, from that stream's own ring of slots (fence_ring.h):
  // waiting on a fence whose event has been recorded again since waits for a later point of the
  // same stream, so never too little.
  std::uint64_t fence() override {
    on_device();
    return breaks_capture("fence") ? 0 : record_fence(stream_, kComputeStream);
  }
  std::uint64_t record_fence(cudaStream_t stream, int which) {
    Fences::Slot slot;
    const std::uint64_t f = fence_ring_.next(which, &slot);
    cudaEvent_t& e = events_[static_cast<std::size_t>(slot.stream)][static_cast<std::size_t>(slot.index)];
    if (e == nullptr) check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "fence");
    check_cuda(cudaEventRecord(e, stream), "fence");
    return f;
  }
  void wait_for(std::uint64_t f) override {
    on_device();
    if (f == 0 || breaks_capture("wait_for")) return;
    const Fences::Slot slot = Fences::slot_of(f);
    check_cuda(cudaEventSynchronize(events_[static_cast<std::size_t>(slot.stream)][static_cast<std::size_t>(slot.index)]),
               "wait for a fence");
  }
  // A pageable source is staged by the driver before cudaMemcpyAsync returns, so the caller may
  // reuse `host_src` at once; a staging (page-locked) one is read by the DMA later (fence()).
  void copy_to_device(void* dst, const void* host_src, std::size_t bytes) override {
    on_device();
    if (bytes == 0 || breaks_capture("copy_to_device")) return;
    check_cuda(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_), "copy to device");
  }
  void copy_to_host(void* host_dst, const void* src, std::size_t bytes) override {
    on_device();
    if (bytes == 0 || breaks_capture("copy_to_host")) return;
    check_cuda(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "copy to host");
    check_cuda(cudaStreamSynchronize(stream_), "copy to host");
  }
  // On a second stream, behind an event of the compute stream, so the copy engine moves them while
  // the compute stream goes on; the fence is an event of that second stream.
  std::uint64_t copy_to_host_async(std::span<const HostCopy> copies) override {
    on_device();
    if (breaks_capture("copy_to_host_async")) return 0;
    if (copy_stream_ == nullptr) {
      check_cuda(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking), "copy stream");
      check_cuda(cudaEventCreateWithFlags(&copy_after_, cudaEventDisableTiming), "copy stream");
    }
    check_cuda(cudaEventRecord(copy_after_, stream_), "copy stream");
    check_cuda(cudaStreamWaitEvent(copy_stream_, copy_after_, 0), "copy stream");
    for (const HostCopy& c : copies) {
      if (c.bytes == 0) continue;
      check_cuda(cudaMemcpyAsync(c.host_dst, c.src, c.bytes, cudaMemcpyDeviceToHost, copy_stream_), "copy to host");
    }
    return record_fence(copy_stream_, kCopyStream);
  }
  void copy_on_device(void* dst, const void* src, std::size_t bytes) override {
    on_device();
    if (bytes == 0) return;
    check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "copy on device");
  }
  bool reads_host_memory() const override { return false; }
  void synchronize() override {
    on_device();
    if (!breaks_capture("synchronize")) check_cuda(cudaStreamSynchronize(stream_), "synchronize");
  }

  void embedding(const TensorView& table, const TensorView& token_ids, const TensorView& out) override {
    on_device();
    check_f32(out, "embedding output");
    BATON_CHECK(table.ndim == 2 && table.stride(1) == 1 && token_ids.dtype == DType::kI32 &&
                    token_ids.numel() == out.dim(0) && out.ndim == 2 && out.dim(1) == table.dim(1),
                "embedding shapes: table ", table.describe(), ", ids ", token_ids.describe(), ", out ", out.describe());
    check_cuda(cuda::embedding(table.data, weight_type(table, "embedding table"), table.stride(0), table.dim(1),
                               token_ids.ptr<std::int32_t>(), token_ids.numel(), rows(out), stream_),
               "embedding");
  }

  void rms_norm(const TensorView& x, const TensorView& weight, float eps, const TensorView& out) override {
    on_device();
    check_f32(x, "rms_norm input");
    check_f32(out, "rms_norm output");
    check_f32(weight, "rms_norm weight");
    const cuda::RowsArg xr = rows(x), outr = rows(out);
    BATON_CHECK(xr.count == outr.count && xr.cols == outr.cols && weight.numel() == xr.cols, "rms_norm shapes: x ",
                x.describe(), ", weight ", weight.describe(), ", out ", out.describe());
    check_cuda(cuda::rms_norm(xr, weight.ptr<float>(), eps, outr, stream_), "rms_norm");
  }

  void linear(const TensorView& x, const TensorView& weight, const TensorView& bias, const TensorView& out) override {
    on_device();
    check_f32(x, "linear input");
    check_f32(out, "linear output");
    BATON_CHECK(x.ndim == 2 && weight.ndim == 2 && out.ndim == 2, "linear expects 2-D views: x ", x.describe(),
                ", weight ", weight.describe(), ", out ", out.describe());
    BATON_CHECK(weight.dim(1) == x.dim(1) && out.dim(0) == x.dim(0) && out.dim(1) == weight.dim(0), "linear shapes: x ",
                x.describe(), ", weight ", weight.describe(), ", out ", out.describe());
    BATON_CHECK(x.stride(1) == 1 && weight.stride(1) == 1 && out.stride(1) == 1, "linear needs contiguous rows");
    cuda::LinearArgs a;
    a.x = x.ptr<float>();
    a.ldx = x.stride(0);
    a.w = weight.data;
    a.w_type = weight_type(weight, "linear weight");
    a.ldw = weight.stride(0);
    if (!bias.empty()) {
      check_f32(bias, "linear bias");
      BATON_CHECK(bias.numel() == weight.dim(0), "bias ", bias.describe(), " for weight ", weight.describe());
      a.bias = bias.ptr<float>();
    }
    a.y = out.ptr<float>();
    a.ldy = out.stride(0);
    a.m = x.dim(0);
    a.n = weight.dim(0);
    a.k = weight.dim(1);
    if (a.m == 0 || a.n == 0) return;
    check_cuda(cuda::linear(gemm_, a, options_.batch_invariant, stream_), "linear");
  }

  void rope_cos_sin(const TensorView& positions, const TensorView& inv_freq, const TensorView& cos_sin) override {
    on_device();
    check_f32(inv_freq, "rope inv_freq");
    check_f32(cos_sin, "rope cos_sin");
    const std::int64_t half = inv_freq.numel();
    BATON_CHECK(positions.dtype == DType::kI32 && cos_sin.ndim == 2 && cos_sin.is_contiguous() &&
                    cos_sin.dim(0) == positions.numel() && cos_sin.dim(1) == 2 * half,
                "rope_cos_sin shapes: positions ", positions.describe(), ", inv_freq ", inv_freq.describe(), ", cos_sin ",
                cos_sin.describe());
    check_cuda(cuda::rope_cos_sin(positions.ptr<std::int32_t>(), positions.numel(), inv_freq.ptr<float>(),
                                  static_cast<int>(half), cos_sin.ptr<float>(), stream_),
               "rope_cos_sin");
  }

  void apply_rope(const TensorView& x, const TensorView& cos_sin) override {
    on_device();
    const cuda::HeadsArg xa = heads(x, "rope input");
    check_f32(cos_sin, "rope cos_sin");
    BATON_CHECK(cos_sin.ndim == 2 && cos_sin.is_contiguous() && cos_sin.dim(0) == xa.tokens &&
                    cos_sin.dim(1) == xa.head_dim && xa.head_dim % 2 == 0,
                "apply_rope shapes: x ", x.describe(), ", cos_sin ", cos_sin.describe());
    check_cuda(cuda::apply_rope(xa, cos_sin.ptr<float>(), stream_), "apply_rope");
  }

  void silu_mul(const TensorView& gate_up, const TensorView& out) override {
    on_device();
    check_f32(gate_up, "silu_mul input");
    check_f32(out, "silu_mul output");
    const cuda::RowsArg in = rows(gate_up), o = rows(out);
    BATON_CHECK(in.count == o.count && in.cols == 2 * o.cols, "silu_mul shapes: ", gate_up.describe(), " -> ",
                out.describe());
    check_cuda(cuda::silu_mul(in, o, stream_), "silu_mul");
  }

  // Mixture-of-experts layers (moe_ops.h). The first call at a size makes the routing tables and
  // the layer's pointer table, which a graph cannot hold: the engine runs each shape eagerly
  // before it captures it, so a capture only meets ready() calls.
  bool runs_moe() const override { return true; }
  void moe(const TensorView& x, const TensorView& router_logits, const MoeExperts& experts, const MoeScratch& scratch,
           const TensorView& out) override {
    on_device();
    const std::int64_t tokens = x.ndim == 2 ? x.dim(0) : 0;
    if (!moe_.ready(experts, tokens)) {
      if (breaks_capture("moe (its first call at this size)")) return;
      moe_.prepare(*this, experts, tokens);
    }
    moe_.run(*this, stream_, x, router_logits, experts, scratch, out);
  }

  // The recurrent layers' ops (recurrent_ops.h).
  bool runs_linear_attention() const override { return true; }
  bool runs_mamba2() const override { return true; }
  void sigmoid_mul(const TensorView& x, const TensorView& gate, const TensorView& out) override {
    on_device();
    cuda_ops::sigmoid_mul(stream_, x, gate, out);
  }
  void relu_squared(const TensorView& x, const TensorView& out) override {
    on_device();
    cuda_ops::relu_squared(stream_, x, out);
  }
  void gated_rms_norm(const TensorView& x, const TensorView& gate, const TensorView& weight, float eps,
                      const TensorView& out) override {
    on_device();
    cuda_ops::gated_rms_norm(stream_, x, gate, weight, eps, out);
  }
  void gated_group_rms_norm(const TensorView& x, const TensorView& gate, const TensorView& weight,
                            std::int64_t group_size, float eps, const TensorView& out) override {
    on_device();
    cuda_ops::gated_group_rms_norm(stream_, x, gate, weight, group_size, eps, out);
  }
  void causal_conv1d(const TensorView& x, const TensorView& weight, const TensorView& bias, const TensorView& state,
                     const RecurrentBatch& batch, const TensorView& out) override {
    on_device();
    cuda_ops::causal_conv1d(stream_, x, weight, bias, state, batch, out);
  }
  void gated_delta_rule(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& b,
                        const TensorView& a, const TensorView& a_log, const TensorView& dt_bias,
                        const TensorView& state, const RecurrentBatch& batch, const TensorView& out) override {
    on_device();
    cuda_ops::gated_delta_rule(stream_, q, k, v, b, a, a_log, dt_bias, state, batch, out);
  }
  void ssd_recurrence(const TensorView& x, const TensorView& dt_in, const TensorView& b, const TensorView& c,
                      const TensorView& a_log, const TensorView& dt_bias, const TensorView& d, float dt_min,
                      float dt_max, const TensorView& state, const RecurrentBatch& batch,
                      const TensorView& out) override {
    on_device();
    cuda_ops::ssd_recurrence(stream_, x, dt_in, b, c, a_log, dt_bias, d, dt_min, dt_max, state, batch, out);
  }

  void add(const TensorView& a, const TensorView& b, const TensorView& out) override {
    on_device();
    check_f32(a, "add input");
    check_f32(b, "add input");
    check_f32(out, "add output");
    const cuda::RowsArg ar = rows(a), br = rows(b), outr = rows(out);
    BATON_CHECK(ar.count == br.count && ar.count == outr.count && ar.cols == br.cols && ar.cols == outr.cols,
                "add shapes: ", a.describe(), " + ", b.describe(), " -> ", out.describe());
    check_cuda(cuda::add(ar, br, outr, stream_), "add");
  }

  void silu_add(const TensorView& x, const TensorView& residual, const TensorView& out) override {
    on_device();
    check_f32(x, "silu_add input");
    check_f32(residual, "silu_add residual");
    check_f32(out, "silu_add output");
    const cuda::RowsArg xr = rows(x), rr = rows(residual), outr = rows(out);
    BATON_CHECK(xr.count == rr.count && xr.count == outr.count && xr.cols == rr.cols && xr.cols == outr.cols,
                "silu_add shapes: silu(", x.describe(), ") + ", residual.describe(), " -> ", out.describe());
    check_cuda(cuda::silu_add(xr, rr, outr, stream_), "silu_add");
  }

  void gather_rows(const TensorView& src, const TensorView& indices, const TensorView& out) override {
    on_device();
    check_f32(src, "gather_rows input");
    check_f32(out, "gather_rows output");
    const cuda::RowsArg s = rows(src), o = rows(out);
    BATON_CHECK(indices.dtype == DType::kI32 && indices.numel() == o.count && s.cols == o.cols, "gather_rows shapes: src ",
                src.describe(), ", indices ", indices.describe(), ", out ", out.describe());
    check_cuda(cuda::gather_rows(s, indices.ptr<std::int32_t>(), o, stream_), "gather_rows");
  }

  void copy(const TensorView& src, const TensorView& out) override {
    on_device();
    BATON_CHECK(src.dtype == out.dtype && dtype_size(src.dtype) == 4, "copy needs two 4-byte views of one dtype: ",
                src.describe(), " -> ", out.describe());
    const cuda::RowsArg s = rows(src), o = rows(out);
    BATON_CHECK(s.count == o.count && s.cols == o.cols, "copy shapes: ", src.describe(), " -> ", out.describe());
    check_cuda(cuda::copy_rows(s, o, stream_), "copy");
  }

  void write_kv(const TensorView& k, const TensorView& v, const TensorView& slot_mapping,
                const TensorView& kv_cache) override {
    on_device();
    const cuda::HeadsArg ka = heads(k, "write_kv keys"), va = heads(v, "write_kv values");
    const cuda::KvCacheArg cache = kv_cache_arg(kv_cache);
    BATON_CHECK(slot_mapping.dtype == DType::kI32 && slot_mapping.numel() == ka.tokens && va.tokens == ka.tokens &&
                    ka.heads == cache.kv_heads && va.heads == cache.kv_heads && ka.head_dim == cache.head_dim &&
                    va.head_dim == cache.head_dim,
                "write_kv shapes: k ", k.describe(), ", v ", v.describe(), ", slots ", slot_mapping.describe(),
                ", cache ", kv_cache.describe());
    check_cuda(cuda::write_kv(ka, va, slot_mapping.ptr<std::int32_t>(), cache, stream_), "write_kv");
  }

  void paged_attention(const TensorView& q, const TensorView& kv_cache, const AttentionBatch& batch, float scale,
                       int sliding_window, const TensorView& out) override {
    on_device();
    cuda::AttentionArgs a;
    a.q = heads(q, "attention q");
    a.out = heads(out, "attention output");
    a.cache = kv_cache_arg(kv_cache);
    BATON_CHECK(a.q.tokens == batch.num_tokens && a.out.tokens == a.q.tokens && a.out.heads == a.q.heads &&
                    a.out.head_dim == a.q.head_dim && a.q.head_dim == a.cache.head_dim &&
                    a.q.heads % a.cache.kv_heads == 0 && a.q.head_dim % 2 == 0 && a.q.head_dim <= 256,
                "paged_attention shapes (head_dim even, <= 256): q ", q.describe(), ", out ", out.describe(), ", cache ",
                kv_cache.describe(), ", tokens ", batch.num_tokens);
    BATON_CHECK(batch.positions.dtype == DType::kI32 && batch.token_seq.dtype == DType::kI32 &&
                    batch.block_tables.dtype == DType::kI32 && batch.block_tables.ndim == 2 &&
                    batch.block_tables.stride(1) == 1,
                "paged_attention batch must be I32 views (block table rows contiguous)");
    a.positions = batch.positions.ptr<std::int32_t>();
    a.token_seq = batch.token_seq.ptr<std::int32_t>();
    a.block_tables = batch.block_tables.ptr<std::int32_t>();
    a.num_seqs = batch.block_tables.dim(0);
    a.max_blocks_per_seq = batch.block_tables.stride(0);
    a.max_context_len = batch.max_context_len;
    a.scale = scale;
    a.sliding_window = sliding_window;
    a.workspace = static_cast<float*>(attention_workspace_.data());
    a.workspace_floats = static_cast<std::int64_t>(attention_workspace_.bytes() / sizeof(float));
    if (a.q.tokens == 0) return;
    check_cuda(cuda::paged_attention(a, stream_), "paged_attention");
  }

  void argmax_rows(const TensorView& logits, const TensorView& out) override {
    on_device();
    check_f32(logits, "argmax_rows logits");
    const cuda::RowsArg l = rows(logits);
    BATON_CHECK(out.dtype == DType::kI32 && out.ndim == 1 && out.numel() == l.count && l.cols > 0,
                "argmax_rows shapes: ", logits.describe(), " -> ", out.describe());
    check_cuda(cuda::argmax_rows(l, out.ptr<std::int32_t>(), kArgmaxHasNaN, kArgmaxNoFinite, stream_), "argmax_rows");
  }

  bool samples_rows() const override { return true; }
  void sample_rows(const TensorView& logits, std::span<const SampleRowParams> params, const TensorView& out) override {
    on_device();
    check_f32(logits, "sample_rows logits");
    const cuda::RowsArg l = rows(logits);
    BATON_CHECK(out.dtype == DType::kI32 && out.ndim == 1 && out.numel() == l.count && l.cols > 0 &&
                    static_cast<std::int64_t>(params.size()) == l.count,
                "sample_rows shapes: ", logits.describe(), " with ", params.size(), " params -> ", out.describe());
    if (l.count == 0 || breaks_capture("sample_rows")) return;
    // The row settings travel in a buffer kept from call to call (grown, never per step).
    const std::size_t bytes = params.size() * sizeof(SampleRowParams);
    if (sample_params_.bytes() < bytes) {
      auto b = allocate(std::max<std::size_t>(bytes, 256 * sizeof(SampleRowParams)));
      BATON_CHECK(b.ok(), "sample_rows: ", b.status().ToString());
      sample_params_ = std::move(*b);
    }
    copy_to_device(sample_params_.data(), params.data(), bytes);
    check_cuda(cuda::sample_rows(l, static_cast<const cuda::SampleRowArgs*>(sample_params_.data()), out.ptr<std::int32_t>(),
                                 kArgmaxHasNaN, kArgmaxNoFinite, stream_),
               "sample_rows");
  }

  // Graphs: the stream's work captured in thread-local mode (calls from other threads, such as a
  // transport allocating memory, do not break it), instantiated once, replayed with cudaGraphLaunch.
  bool captures_graphs() const override { return true; }
  absl::Status begin_capture() override {
    on_device();
    if (capture_thread_.load() != std::thread::id()) {
      return absl::FailedPreconditionError("begin_capture(): a graph capture is already running");
    }
    const cudaError_t err = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return absl::InternalError(str_cat("begin graph capture: ", cudaGetErrorString(err)));
    }
    capture_broken_by_.clear();
    capture_thread_.store(std::this_thread::get_id());
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<OpGraph>> end_capture() override {
    on_device();
    if (capture_thread_.load() != std::this_thread::get_id()) {
      return absl::FailedPreconditionError("end_capture() without begin_capture() on this thread");
    }
    cudaGraph_t graph = nullptr;
    cudaError_t err = cudaStreamEndCapture(stream_, &graph);
    capture_thread_.store(std::thread::id());
    if (err != cudaSuccess || !capture_broken_by_.empty()) {
      cudaGetLastError();
      if (graph != nullptr) cudaGraphDestroy(graph);
      return absl::FailedPreconditionError(
          capture_broken_by_.empty() ? str_cat("graph capture: ", cudaGetErrorString(err))
                                     : str_cat("graph capture broken by ", capture_broken_by_, "()"));
    }
    cudaGraphExec_t exec = nullptr;
    err = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return absl::InternalError(str_cat("graph instantiation: ", cudaGetErrorString(err)));
    }
    return std::unique_ptr<OpGraph>(new CudaOpGraph(exec, stream_, binding_));
  }

 protected:
  void free(void* data, std::size_t /*bytes*/) override {
    binding_.bind();  // a failure here shows at the next call
    // cudaFree waits for the device; a failure here means the context is already broken.
    cudaFree(data);
  }
  void free_staging(void* data, std::size_t /*bytes*/) override {
    binding_.bind();
    cudaFreeHost(data);
  }

 private:
  explicit CudaBackend(const BackendOptions& options)
      : options_(options), binding_(options.device.index, cuda_runtime()) {}

  // Every entry point that reaches the CUDA runtime first binds the calling thread to this GPU
  // (device_binding.h): the engine, transports and tests call from threads of their own.
  void on_device() const { check_cuda(static_cast<cudaError_t>(binding_.bind()), "set device"); }

  // A call no graph can hold (memory, host synchronisation, host-side parameters) while this thread
  // captures: remembered so that end_capture() fails naming it, and skipped (the CUDA call would
  // invalidate the capture). Returns true then.
  bool breaks_capture(const char* call) {
    if (capture_thread_.load() != std::this_thread::get_id()) return false;
    if (capture_broken_by_.empty()) capture_broken_by_ = call;
    return true;
  }

  BackendOptions options_;
  cuda::DeviceBinding binding_;
  std::string name_ = "unknown GPU";
  cudaStream_t stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;  // copy_to_host_async()'s, made at its first call
  cudaEvent_t copy_after_ = nullptr;     // where on stream_ its copies start
  cuda::GemmContext* gemm_ = nullptr;
  DeviceBuffer sample_params_;  // [>= rows] SampleRowParams for sample_rows()
  cuda_ops::MoeRunner moe_;     // moe()'s routing tables and expert pointer tables
  // Split-mode attention states: 64 MiB holds 7 sequences x 32 heads x 128 dims at a 128k-token
  // context bound (about 120 at 8k); larger calls run whole-mode, with the same bits.
  static constexpr std::size_t kAttentionWorkspaceBytes = std::size_t{64} << 20;
  DeviceBuffer attention_workspace_;
  static constexpr int kComputeStream = 0, kCopyStream = 1;
  using Fences = cuda::FenceRing<2, 32>;
  Fences fence_ring_;                                    // fence ids -> (stream, slot)
  std::array<std::array<cudaEvent_t, 32>, 2> events_{};  // [stream][slot], made on first use
  std::atomic<std::thread::id> capture_thread_{};  // the thread capturing a graph, if any
  std::string capture_broken_by_;                  // written by that thread only
};

}  // namespace

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

absl::StatusOr<std::unique_ptr<Backend>> make_cuda_backend(const BackendOptions& options) {
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> b, CudaBackend::create(options));
  return std::unique_ptr<Backend>(std::move(b));
}

}  // namespace baton
