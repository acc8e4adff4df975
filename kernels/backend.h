// Backend: the compute interface every device implements (CPU now, CUDA next).
//
// Model code allocates through a Backend and calls its ops on TensorViews; it never touches
// activation memory from the host, so the same model code runs on any device. Ops are enqueued in
// call order (the CPU backend simply runs them); results are visible to the host after
// synchronize() or a copy_to_host(). Shapes in the comments below are [rows, cols] with the last
// dimension contiguous unless said otherwise; "act" is activation_dtype().
//
// Batch invariance: every op computes a row (token) the same way whatever else shares the call, so
// a token's results are bit-identical in a prefill, a decode step, a (k+1)-token verification or a
// mixed batch. An implementation may offer faster non-invariant paths only behind an explicit
// opt-in (BackendOptions::batch_invariant = false).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/tensor.h"

namespace baton {

class Backend;

// Memory owned by a backend, returned to it on destruction: device memory (allocate()), or host
// staging memory (allocate_staging(); `staging`).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend* owner, void* data, std::size_t bytes, bool staging = false)
      : owner_(owner), data_(data), bytes_(bytes), staging_(staging) {}
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  bool staging() const { return staging_; }
  // A contiguous view of the buffer's start with this dtype and shape (must fit); on the host for
  // staging memory.
  TensorView view(DType dtype, std::initializer_list<std::int64_t> shape) const;

 private:
  void release();

  Backend* owner_ = nullptr;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  bool staging_ = false;
};

struct BackendOptions {
  Device device{};              // where the backend computes: cpu, or cuda:<index>
  int num_threads = 0;          // CPU: 0 = one per available core
  bool batch_invariant = true;  // false allows faster kernels whose rows depend on the batch
  std::string cpu_isa = "auto";  // CPU: auto, portable, avx2, avx512 (for tests and comparisons)
  // CPU, for tests: act like a device whose memory the host cannot read (results copied with
  // copy_to_host, weights copied in, not used in place), so the engine's GPU paths run here too.
  bool cpu_discrete_memory = false;
};

// One copy_to_host_async() copy: bytes from device memory src to host memory host_dst.
struct HostCopy {
  void* host_dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0;
};

// Inputs of one attention call over a varlen batch of sequences (all I32, in device memory).
struct AttentionBatch {
  TensorView positions;     // [tokens] absolute position of each new token
  TensorView token_seq;     // [tokens] index of each token's sequence
  TensorView block_tables;  // [num_seqs, max_blocks_per_seq] physical KV block ids
  std::int64_t num_tokens = 0;
  // At least the longest (position + 1) in the batch: a bound, not the exact value, so that a
  // graph captured with the model's max_model_len here replays for any context that fits.
  std::int64_t max_context_len = 0;
};

// One row's settings for sample_rows(): the host Sampler's processing of a request without
// penalties or a min_tokens mask (temperature, top-k, top-p, min-p; engine/sample/sampler.h), and
// the row's draw: uniform 0 of the token stream (seed, position) (engine/sample/random.h).
struct SampleRowParams {
  float temperature = -1.0f;  // <= 1e-5: greedy (argmax_rows' pick); < 0: skip the row
  std::int32_t top_k = 0;     // <= 0 or >= vocab: off
  float top_p = 1.0f;         // >= 1: off
  float min_p = 0.0f;         // <= 0: off
  std::uint64_t seed = 0;
  std::int64_t position = 0;
};

// One mixture-of-experts layer's experts, for Backend::moe(): expert e's fused [gate; up]
// [2 inter, hidden] and down [hidden, inter] matrices (linear() weights, packed or not), and
// optionally a shared expert every token goes through, scaled by a sigmoid gate.
struct MoeExperts {
  std::vector<TensorView> gate_up;
  std::vector<TensorView> down;
  std::int32_t top_k = 0;
  bool normalize = false;  // divide the top-k probabilities by their sum
  TensorView shared_gate_up;  // [2 shared_inter, hidden], or empty: no shared expert
  TensorView shared_down;     // [hidden, shared_inter]
  TensorView shared_gate;     // [1, hidden]: the shared expert's gate logit
};

// moe()'s scratch, act: the first four with at least tokens * top_k rows, the shared ones (with a
// shared expert only) tokens rows.
struct MoeScratch {
  TensorView rows;     // [rows, hidden]: the tokens, grouped by expert
  TensorView gate_up;  // [rows, 2 inter]
  TensorView act;      // [rows, inter]
  TensorView out;      // [rows, hidden]: each (token, expert) pair's expert output
  TensorView shared_gate_up;  // [tokens, 2 shared_inter]
  TensorView shared_act;      // [tokens, shared_inter]
  TensorView shared_out;      // [tokens, hidden]
  TensorView shared_logit;    // [tokens, 1]
};

// The sequences of a batch as the recurrent ops (causal_conv1d, gated_delta_rule) see them. Each
// keeps its state in `slots` slots of a state group: the slot it starts from, and the slots the
// states after its last min(tokens, slots) tokens go to, in order (slot j - max(0, tokens - slots)
// after token j; so with tokens <= slots, slot j holds the state after token j, which lets a
// verification step keep the state after whichever draft was accepted without recomputing).
// The largest per-head sizes the recurrent ops take on every backend (a kernel may hold a head's
// column or row of state per thread): ModelConfig refuses models beyond them at load.
inline constexpr std::int32_t kMaxRecurrentConvKernel = 17;    // causal_conv1d taps
inline constexpr std::int32_t kMaxRecurrentStateColumn = 256;  // DeltaNet key_dim, Mamba-2 state size
inline constexpr std::int32_t kMaxRecurrentHeadWidth = 1024;   // DeltaNet value_dim, Mamba-2 head_dim

struct RecurrentBatch {
  // [num_seqs, 4] I32 per sequence: its first token row, its token count, its state group (< 0:
  // padding, computed from the zero state and kept nowhere), and the slot holding the state before
  // its first token (< 0: the zero state). Rows no sequence covers are left alone.
  TensorView seqs;
  std::int32_t slots = 1;
};

// argmax_rows()' answers for rows that have no greedy pick.
inline constexpr std::int32_t kArgmaxHasNaN = -1;
inline constexpr std::int32_t kArgmaxNoFinite = -2;

// Ops recorded once by Backend::begin_capture() / end_capture() and replayed as a whole: a CUDA
// graph on a GPU. A replay runs the recorded ops with the arguments they were recorded with (the
// same buffers, shapes and launch values); only the contents of the buffers may differ.
class OpGraph {
 public:
  virtual ~OpGraph() = default;
  // Enqueues the recorded ops, in order, like the calls themselves would.
  virtual void replay() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  virtual std::string describe() const = 0;  // e.g. "cpu (avx512, 2 threads, batch-invariant)"
  virtual DType activation_dtype() const = 0;
  // Whether write_kv() and paged_attention() take a KV cache of this dtype; act always.
  virtual bool supports_kv_cache_dtype(DType dtype) const { return dtype == activation_dtype(); }

  // ---- memory --------------------------------------------------------------------------------
  virtual absl::StatusOr<DeviceBuffer> allocate(std::size_t bytes) = 0;
  virtual void copy_to_device(void* dst, const void* host_src, std::size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, std::size_t bytes) = 0;
  virtual void copy_on_device(void* dst, const void* src, std::size_t bytes) = 0;
  // Device -> host copies that start once all work enqueued so far has run and may run beside work
  // enqueued after them (a GPU's copy engine), e.g. a layer's new KV rows going to a host mirror
  // while the next layer computes. Returns a fence that passes once they are done; it says nothing
  // of work enqueued after them. The sources must not be written by later work before that fence.
  // Default: copy_to_host() each, at once.
  virtual std::uint64_t copy_to_host_async(std::span<const HostCopy> copies) {
    for (const HostCopy& c : copies) copy_to_host(c.host_dst, c.src, c.bytes);
    return 0;
  }
  // True when host memory (e.g. a memory-mapped checkpoint) can be used as weights in place.
  virtual bool reads_host_memory() const = 0;
  // True when device buffers are ordinary host memory that the host may read in place once
  // synchronize() has returned, so results need no copy_to_host.
  virtual bool host_reads_device_memory() const { return false; }
  virtual void synchronize() = 0;

  // Host memory for the copies every step makes (a forward's metadata upload, the picked ids):
  // page-locked on a GPU, so a copy from it is a DMA the host does not wait for and a copy to it
  // needs no bounce buffer. Plain host memory by default (the CPU). A copy_to_device() source in
  // staging memory may still be in flight when the call returns: rewrite it only once a fence
  // taken after the copy has passed.
  virtual absl::StatusOr<DeviceBuffer> allocate_staging(std::size_t bytes);
  // A point in the queue of enqueued work: wait_for(f) returns once everything enqueued before
  // fence() returned f has run. Free where ops run at the call (the CPU); 0 is always passed.
  virtual std::uint64_t fence() { return 0; }
  virtual void wait_for(std::uint64_t fence) { (void)fence; }

  // A copy of a linear() weight [n, k] in the layout this backend's linear() reads fastest, made
  // once at model load. Returns an empty buffer when the backend has no such layout for this
  // weight (then keep using `weight`). Otherwise *packed is a view of the returned buffer with
  // the weight's dtype and shape; it may only be passed to linear() as its weight (its bytes are
  // not row-major) and is valid while the buffer lives.
  virtual absl::StatusOr<DeviceBuffer> pack_linear_weight(const TensorView& weight, TensorView* packed) {
    (void)weight;
    (void)packed;
    return DeviceBuffer();
  }

  // ---- ops -----------------------------------------------------------------------------------
  // out[t, :] = table[token_ids[t], :] widened to act. table: [vocab, hidden] F32/BF16/F16;
  // token_ids: [tokens] I32; out: [tokens, hidden] act.
  virtual void embedding(const TensorView& table, const TensorView& token_ids, const TensorView& out) = 0;

  // out = x * rsqrt(mean(x^2, last dim) + eps) * weight. x, out: [rows, dim] or [rows, heads, dim]
  // (strided rows allowed, may alias); weight: [dim] F32.
  virtual void rms_norm(const TensorView& x, const TensorView& weight, float eps, const TensorView& out) = 0;

  // The residual add and the norm after it in one pass: residual = residual + x, then
  // out = rms_norm(residual). Bit-identical to add() then rms_norm(). residual, x, out:
  // [rows, dim] act (out may alias x); weight: [dim] F32. Backends without a fused kernel run the two.
  virtual void add_rms_norm(const TensorView& residual, const TensorView& x, const TensorView& weight, float eps,
                            const TensorView& out) {
    add(residual, x, residual);
    rms_norm(residual, weight, eps, out);
  }

  // out = x @ weight^T (+ bias). x: [rows, k] act; weight: [n, k] F32/BF16/F16; bias: [n] F32 or
  // empty; out: [rows, n] act.
  virtual void linear(const TensorView& x, const TensorView& weight, const TensorView& bias,
                      const TensorView& out) = 0;

  // cos_sin[t, i] = cos(positions[t] * inv_freq[i]), cos_sin[t, half + i] = sin(...), i < half.
  // positions: [tokens] I32; inv_freq: [half] F32; cos_sin: [tokens, 2 * half] F32.
  virtual void rope_cos_sin(const TensorView& positions, const TensorView& inv_freq,
                            const TensorView& cos_sin) = 0;

  // Rotary embedding in place, "rotate half" convention: for i < half,
  // (x[i], x[i + half]) <- (x[i] cos - x[i + half] sin, x[i + half] cos + x[i] sin).
  // x: [tokens, heads, head_dim] (strided), cos_sin: [tokens, head_dim]. Partial rotary passes a
  // view of each head's first rotary_dim dims (head_dim = rotary_dim here).
  virtual void apply_rope(const TensorView& x, const TensorView& cos_sin) = 0;

  // out[t, i] = silu(gate_up[t, i]) * gate_up[t, inter + i]. gate_up: [tokens, 2 * inter];
  // out: [tokens, inter].
  virtual void silu_mul(const TensorView& gate_up, const TensorView& out) = 0;

  // out = a + b elementwise; [rows, cols], may alias.
  virtual void add(const TensorView& a, const TensorView& b, const TensorView& out) = 0;

  // out = residual + silu(x) elementwise (a Medusa residual block's update); [rows, cols] F32,
  // any of them may alias.
  virtual void silu_add(const TensorView& x, const TensorView& residual, const TensorView& out) = 0;

  // out[i, :] = src[indices[i], :]. src: [tokens, cols]; indices: [n] I32; out: [n, cols].
  virtual void gather_rows(const TensorView& src, const TensorView& indices, const TensorView& out) = 0;

  // out = src for two views of the same shape (strided rows allowed).
  virtual void copy(const TensorView& src, const TensorView& out) = 0;

  // Stores each new token's key and value into its slot (block * block_size + offset); a negative
  // slot skips the token. k, v: [tokens, kv_heads, head_dim] (strided rows allowed);
  // slot_mapping: [tokens] I32; kv_cache: one layer, [num_blocks, 2, block_size, kv_heads, head_dim]
  // of a dtype supports_kv_cache_dtype() accepts (a narrower one stores the values rounded to
  // nearest even).
  virtual void write_kv(const TensorView& k, const TensorView& v, const TensorView& slot_mapping,
                        const TensorView& kv_cache) = 0;

  // Causal attention of each new token over its sequence's cached keys/values (written by
  // write_kv first), GQA, optional sliding window (0 = none). q: [tokens, heads, head_dim]
  // (strided rows allowed); out: [tokens, heads, head_dim]. A narrower cache's values are widened
  // exactly: the result is the one over a cache of act holding the same (rounded) values.
  virtual void paged_attention(const TensorView& q, const TensorView& kv_cache, const AttentionBatch& batch,
                               float scale, int sliding_window, const TensorView& out) = 0;

  // Greedy picks where the logits are, so that only token ids need to reach the host:
  // out[r] = the lowest index of the largest entry of logits row r (-0 and +0 tie), or
  // kArgmaxHasNaN when the row holds a NaN, kArgmaxNoFinite when every entry is -inf.
  // logits: [rows, vocab] F32 (strided rows allowed); out: [rows] I32.
  virtual void argmax_rows(const TensorView& logits, const TensorView& out) = 0;
  // Whether moe() exists here (a model with mixture-of-experts layers refuses to load otherwise).
  virtual bool runs_moe() const { return false; }
  // A mixture-of-experts MLP. For each token t: p = softmax(router_logits[t]) in F32; its experts
  // are the top_k entries of p (the larger first, ties to the lower index), weighted by p (divided
  // by the top_k's sum when experts.normalize); out[t] = the sum, in that order, of
  // weight * down_e(silu(gate_e(x[t])) * up_e(x[t])), then (with a shared expert) plus
  // sigmoid(shared_gate . x[t]) * shared(x[t]). A token's result depends on its own row only. x: [tokens, hidden] act; router_logits: [tokens, num_experts] F32; out: [tokens, hidden]
  // act (may alias x). Default: none (runs_moe() false).
  virtual void moe(const TensorView& x, const TensorView& router_logits, const MoeExperts& experts,
                   const MoeScratch& scratch, const TensorView& out);

  // Whether the linear-attention ops below exist here (a model with such layers refuses to load
  // otherwise).
  virtual bool runs_linear_attention() const { return false; }
  // out = x * sigmoid(gate), elementwise. x, gate, out: [rows, cols] act (strided rows allowed; out
  // may alias x). Gated attention's output gate.
  virtual void sigmoid_mul(const TensorView& x, const TensorView& gate, const TensorView& out);
  // Depthwise causal convolution over each sequence's tokens, then SiLU:
  // out[t, c] = silu(bias[c] + sum_j weight[c, j] * in[t - (K - 1) + j, c]), the inputs before a sequence's
  // first token coming from its state (the last K - 1 inputs, oldest first; zeros when it starts
  // from the zero state). The states after its tokens are stored as RecurrentBatch says.
  // x: [tokens, channels] act (strided rows allowed); weight: [channels, K] F32; bias: [channels]
  // F32 or empty (none); state: [groups, slots, (K - 1) * channels] F32, one slot laid out
  // [K - 1, channels]; out: [tokens, channels] act (must not alias x).
  virtual void causal_conv1d(const TensorView& x, const TensorView& weight, const TensorView& bias,
                             const TensorView& state, const RecurrentBatch& batch, const TensorView& out);
  // The gated delta rule (Gated DeltaNet), token by token within each sequence. Per value head h
  // (key head h / (v_heads / k_heads)), with q and k L2-normalized (eps 1e-6) and q scaled by
  // 1 / sqrt(key_dim), beta = sigmoid(b), decay = exp(-exp(a_log) * softplus(a + dt_bias)):
  //   S = decay * S;  S += k (beta (v - k^T S))^T;  out = q^T S,   S: [key_dim, value_dim] F32.
  // q, k: [tokens, k_heads, key_dim] act (strided); v: [tokens, v_heads, value_dim] act (strided);
  // b, a: [tokens, v_heads] act (strided); a_log, dt_bias: [v_heads] F32;
  // state: [groups, slots, v_heads * key_dim * value_dim] F32 (S of head h at h * key_dim * value_dim);
  // out: [tokens, v_heads, value_dim] act.
  virtual void gated_delta_rule(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& b,
                                const TensorView& a, const TensorView& a_log, const TensorView& dt_bias,
                                const TensorView& state, const RecurrentBatch& batch, const TensorView& out);
  // out = rms_norm(x) * weight * silu(gate) per row. x, gate, out: [rows, dim] or [rows, heads, dim]
  // act (strided rows allowed; out may alias x); weight: [dim] F32.
  virtual void gated_rms_norm(const TensorView& x, const TensorView& gate, const TensorView& weight, float eps,
                              const TensorView& out);

  // Whether the Mamba-2 ops below exist here (a model with Mamba-2 layers or a relu² MLP refuses
  // to load otherwise). causal_conv1d above is theirs too.
  virtual bool runs_mamba2() const { return false; }
  // out = relu(x)², elementwise. x, out: [rows, cols] act (out may alias x). Nemotron-H's MLP.
  virtual void relu_squared(const TensorView& x, const TensorView& out);
  // Mamba-2's selective state-space recurrence, token by token within each sequence. Per head h
  // (of group g = h / (heads / groups)), with dt = clamp(softplus(dt_in + dt_bias), dt_min,
  // dt_max) and decay = exp(-exp(a_log) * dt):
  //   S = decay * S + dt * x B^T;  out = S C + d * x,   S: [head_dim, state] F32.
  // x: [tokens, heads, head_dim] act (strided); dt_in: [tokens, heads] act (strided);
  // b, c: [tokens, groups, state] act (strided); a_log, dt_bias, d: [heads] F32;
  // state: [groups, slots, heads * head_dim * state] F32 (S of head h at h * head_dim * state);
  // out: [tokens, heads, head_dim] act.
  virtual void ssd_recurrence(const TensorView& x, const TensorView& dt_in, const TensorView& b, const TensorView& c,
                              const TensorView& a_log, const TensorView& dt_bias, const TensorView& d, float dt_min,
                              float dt_max, const TensorView& state, const RecurrentBatch& batch,
                              const TensorView& out);
  // Mamba-2's gated norm (gate first): u = x * silu(gate); out = u / sqrt(mean(u²) + eps) * weight,
  // the mean over each group of group_size consecutive columns. x, gate, out: [rows, cols] act
  // (strided rows allowed; out may alias x); weight: [cols] F32; cols a multiple of group_size.
  virtual void gated_group_rms_norm(const TensorView& x, const TensorView& gate, const TensorView& weight,
                                    std::int64_t group_size, float eps, const TensorView& out);

  // Whether sample_rows() exists here. The CPU has none: its host Sampler reads the rows in place.
  virtual bool samples_rows() const { return false; }
  // Draws every row's token where the logits are (rows whose temperature is < 0 are left alone),
  // with argmax_rows()' codes for rows without one (kArgmaxHasNaN also for a sampled row whose
  // max is +inf after temperature: it has no distribution). logits: [rows, vocab] F32; params: [rows]
  // host; out: [rows] I32. Only where samples_rows().
  virtual void sample_rows(const TensorView& logits, std::span<const SampleRowParams> params, const TensorView& out);

  // ---- graphs --------------------------------------------------------------------------------
  // Between begin_capture() and end_capture(), the ops above (not the memory calls, fence(),
  // wait_for() or sample_rows(), which break the capture) are recorded rather than run; nothing
  // they write changes until the graph is replayed. Launch arguments are frozen in the graph, so
  // whatever varies between replays must be read from device memory (AttentionBatch's
  // max_context_len is a bound for this reason). end_capture() fails, naming the call, when one
  // broke the capture; the backend is then out of capture mode either way.
  virtual bool captures_graphs() const { return false; }
  virtual absl::Status begin_capture();
  virtual absl::StatusOr<std::unique_ptr<OpGraph>> end_capture();

 protected:
  friend class DeviceBuffer;
  virtual void free(void* data, std::size_t bytes) = 0;
  virtual void free_staging(void* data, std::size_t bytes);
};

// The CPU backend with these options (kernels/cpu/cpu_backend.h has the class). Most callers want
// make_backend() (kernels/backend_factory.h), which picks the backend by options.device.
absl::StatusOr<std::unique_ptr<Backend>> make_cpu_backend(const BackendOptions& options);

}  // namespace baton
