// The recurrent layers' CUDA ops (recurrent.cuh). Elementwise ops are grid-stride loops; the norms
// give each row (or group) one warp with a fixed butterfly; the recurrences give each
// (sequence, head) one block and keep a thread's column or row of the state in registers.
#include "kernels/cuda/recurrent.cuh"

namespace baton::cuda {
namespace {

constexpr int kThreads = 256;

__device__ inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ inline float siluf(float x) { return x / (1.0f + expf(-x)); }
// torch.nn.functional.softplus with its default threshold: x itself above 20.
__device__ inline float softplusf(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

template <class T>
__device__ inline T* element(const RowsArg& a, std::int64_t e) {
  return row_ptr<T>(a, e / a.cols) + e % a.cols;
}

// A fixed butterfly over the warp; every lane ends with the same bits.
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = __fadd_rn(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

struct Seq {
  std::int64_t first_row, tokens, group, slot_in, first_kept;
};

__device__ inline Seq seq_at(const SeqsArg& seqs, std::int64_t s) {
  const std::int32_t* p = seqs.data + 4 * s;
  Seq q{p[0], p[1], p[2], p[3], 0};
  q.first_kept = q.tokens - (q.tokens < seqs.slots ? q.tokens : seqs.slots);
  return q;
}

__device__ inline float* slot_ptr(const StateArg& st, std::int64_t group, std::int64_t slot) {
  return st.data + group * st.stride0 + slot * st.stride1;
}

// Whether the sequence names a state it may read (slot_in) and groups it may write; the host plan
// checks them, an out-of-range one here reads zeros and writes nothing.
__device__ inline bool reads_slot(const Seq& q, const StateArg& st) {
  return q.group >= 0 && q.group < st.groups && q.slot_in >= 0 && q.slot_in < st.slots;
}
__device__ inline bool writes_slots(const Seq& q, const StateArg& st) { return q.group >= 0 && q.group < st.groups; }

__global__ void sigmoid_mul_kernel(RowsArg x, RowsArg gate, RowsArg out) {
  const std::int64_t total = out.count * out.cols;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    *element<float>(out, e) = *element<float>(x, e) * sigmoidf(*element<float>(gate, e));
  }
}

__global__ void relu_squared_kernel(RowsArg x, RowsArg out) {
  const std::int64_t total = out.count * out.cols;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float v = fmaxf(*element<float>(x, e), 0.0f);
    *element<float>(out, e) = v * v;
  }
}

// One warp per (row, group): gate_first false is Qwen3-Next's norm(x) * w * silu(gate) over the
// whole row (group_size = cols); true is Mamba-2's norm(x * silu(gate)) * w per group.
__global__ void gated_norm_kernel(RowsArg x, RowsArg gate, const float* __restrict__ weight, std::int64_t group_size,
                                  float eps, bool gate_first, RowsArg out) {
  const std::int64_t groups = out.cols / group_size;
  const std::int64_t unit = blockIdx.x * static_cast<std::int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  if (unit >= out.count * groups) return;
  const int lane = threadIdx.x % 32;
  const std::int64_t r = unit / groups, c0 = (unit % groups) * group_size;
  const float* xr = row_ptr<float>(x, r) + c0;
  const float* gr = row_ptr<float>(gate, r) + c0;
  float* o = row_ptr<float>(out, r) + c0;
  float sq = 0.0f;
  for (std::int64_t i = lane; i < group_size; i += 32) {
    const float u = gate_first ? xr[i] * siluf(gr[i]) : xr[i];
    sq = fmaf(u, u, sq);
  }
  const float inv = rsqrtf(warp_sum(sq) / static_cast<float>(group_size) + eps);
  __syncwarp();
  for (std::int64_t i = lane; i < group_size; i += 32) {
    const float g = siluf(gr[i]);
    o[i] = gate_first ? xr[i] * g * inv * weight[c0 + i] : xr[i] * inv * weight[c0 + i] * g;
  }
}

// One thread per (sequence, channel): its taps over the sequence's tokens, its column of the
// convolution's history read from slot_in first and written to the kept slots after.
__global__ void causal_conv1d_kernel(RowsArg x, const float* __restrict__ weight, const float* __restrict__ bias,
                                     int taps, StateArg state, SeqsArg seqs, RowsArg out) {
  const std::int64_t channels = x.cols;
  const std::int64_t task = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (task >= seqs.num_seqs * channels) return;
  const Seq q = seq_at(seqs, task / channels);
  const std::int64_t c = task % channels;
  const int history = taps - 1;
  float start[kMaxConvHistory];
  for (int u = 0; u < history; ++u) {
    start[u] = reads_slot(q, state) ? slot_ptr(state, q.group, q.slot_in)[u * channels + c] : 0.0f;
  }
  // Input u of the sequence (u < 0: from its starting state).
  auto input = [&](std::int64_t u) -> float {
    return u >= 0 ? row_ptr<float>(x, q.first_row + u)[c] : start[history + u];
  };
  const float* wc = weight + c * taps;
  for (std::int64_t t = 0; t < q.tokens; ++t) {
    float acc = bias != nullptr ? bias[c] : 0.0f;
    for (int j = 0; j < taps; ++j) acc = fmaf(wc[j], input(t - history + j), acc);
    row_ptr<float>(out, q.first_row + t)[c] = siluf(acc);
  }
  if (!writes_slots(q, state)) return;
  for (std::int64_t t = q.first_kept; t < q.tokens; ++t) {
    float* slot = slot_ptr(state, q.group, t - q.first_kept);
    for (int u = 0; u < history; ++u) slot[u * channels + c] = input(t - history + 1 + u);
  }
}

// One block per (sequence, value head), thread j owning column j of S [dk, dv].
__global__ void gated_delta_rule_kernel(DeltaRuleArgs a, StateArg state, SeqsArg seqs) {
  const int v_heads = a.v.heads, dk = a.q.head_dim, dv = a.v.head_dim;
  const std::int64_t s = blockIdx.x / v_heads;
  const int h = static_cast<int>(blockIdx.x % v_heads), hk = h / (v_heads / a.q.heads);
  const int j = threadIdx.x;
  const Seq q = seq_at(seqs, s);
  if (j >= dv || q.tokens == 0) return;
  const std::int64_t head_state = static_cast<std::int64_t>(dk) * dv, base = h * head_state;
  float col[kMaxStateColumn];
  for (int i = 0; i < dk; ++i) col[i] = reads_slot(q, state) ? slot_ptr(state, q.group, q.slot_in)[base + i * dv + j] : 0.0f;
  const float scale = rsqrtf(static_cast<float>(dk));
  const float decay_rate = -expf(a.a_log[h]);
  for (std::int64_t t = 0; t < q.tokens; ++t) {
    const std::int64_t row = q.first_row + t;
    const float* qr = a.q.data + row * a.q.stride0 + hk * a.q.stride1;
    const float* kr = a.k.data + row * a.k.stride0 + hk * a.k.stride1;
    float q_sq = 0.0f, k_sq = 0.0f;
    for (int i = 0; i < dk; ++i) {
      q_sq = fmaf(qr[i], qr[i], q_sq);
      k_sq = fmaf(kr[i], kr[i], k_sq);
    }
    const float q_inv = rsqrtf(q_sq + 1e-6f) * scale, k_inv = rsqrtf(k_sq + 1e-6f);
    const float beta = sigmoidf(row_ptr<float>(a.b, row)[h]);
    const float decay = expf(decay_rate * softplusf(row_ptr<float>(a.a, row)[h] + a.dt_bias[h]));
    float mem = 0.0f;
    for (int i = 0; i < dk; ++i) {
      col[i] *= decay;
      mem = fmaf(kr[i] * k_inv, col[i], mem);
    }
    const float delta = (a.v.data[row * a.v.stride0 + h * a.v.stride1 + j] - mem) * beta;
    float o = 0.0f;
    for (int i = 0; i < dk; ++i) {
      col[i] = fmaf(kr[i] * k_inv, delta, col[i]);
      o = fmaf(qr[i] * q_inv, col[i], o);
    }
    a.out.data[row * a.out.stride0 + h * a.out.stride1 + j] = o;
    if (writes_slots(q, state) && t >= q.first_kept) {
      float* dst = slot_ptr(state, q.group, t - q.first_kept) + base;
      for (int i = 0; i < dk; ++i) dst[i * dv + j] = col[i];
    }
  }
}

// One block per (sequence, head), thread p owning row p of S [head_dim, state].
__global__ void ssd_recurrence_kernel(SsdArgs a, StateArg state, SeqsArg seqs) {
  const int heads = a.x.heads, head_dim = a.x.head_dim, n = a.b.head_dim;
  const std::int64_t s = blockIdx.x / heads;
  const int h = static_cast<int>(blockIdx.x % heads), g = h / (heads / a.b.heads);
  const int p = threadIdx.x;
  const Seq q = seq_at(seqs, s);
  if (p >= head_dim || q.tokens == 0) return;
  const std::int64_t base = static_cast<std::int64_t>(h) * head_dim * n + static_cast<std::int64_t>(p) * n;
  float row_state[kMaxStateColumn];
  for (int i = 0; i < n; ++i) row_state[i] = reads_slot(q, state) ? slot_ptr(state, q.group, q.slot_in)[base + i] : 0.0f;
  const float decay_rate = -expf(a.a_log[h]);
  for (std::int64_t t = 0; t < q.tokens; ++t) {
    const std::int64_t row = q.first_row + t;
    const float xp = a.x.data[row * a.x.stride0 + h * a.x.stride1 + p];
    const float* br = a.b.data + row * a.b.stride0 + g * a.b.stride1;
    const float* cr = a.c.data + row * a.c.stride0 + g * a.c.stride1;
    const float dt = fminf(fmaxf(softplusf(row_ptr<float>(a.dt, row)[h] + a.dt_bias[h]), a.dt_min), a.dt_max);
    const float decay = expf(dt * decay_rate), dx = dt * xp;
    float y = 0.0f;
    for (int i = 0; i < n; ++i) {
      row_state[i] = fmaf(row_state[i], decay, dx * br[i]);
      y = fmaf(row_state[i], cr[i], y);
    }
    a.out.data[row * a.out.stride0 + h * a.out.stride1 + p] = fmaf(a.d[h], xp, y);
    if (writes_slots(q, state) && t >= q.first_kept) {
      float* dst = slot_ptr(state, q.group, t - q.first_kept) + base;
      for (int i = 0; i < n; ++i) dst[i] = row_state[i];
    }
  }
}

unsigned warps_blocks(std::int64_t units) { return static_cast<unsigned>((units + kThreads / 32 - 1) / (kThreads / 32)); }

int threads_for(int n) { return ((n + 31) / 32) * 32; }

}  // namespace

cudaError_t sigmoid_mul(RowsArg x, RowsArg gate, RowsArg out, cudaStream_t stream) {
  const std::int64_t total = out.count * out.cols;
  if (total == 0) return cudaSuccess;
  sigmoid_mul_kernel<<<grid_stride_blocks(total, kThreads), kThreads, 0, stream>>>(x, gate, out);
  return cudaGetLastError();
}

cudaError_t relu_squared(RowsArg x, RowsArg out, cudaStream_t stream) {
  const std::int64_t total = out.count * out.cols;
  if (total == 0) return cudaSuccess;
  relu_squared_kernel<<<grid_stride_blocks(total, kThreads), kThreads, 0, stream>>>(x, out);
  return cudaGetLastError();
}

cudaError_t gated_rms_norm(RowsArg x, RowsArg gate, const float* weight, float eps, RowsArg out, cudaStream_t stream) {
  if (out.count == 0) return cudaSuccess;
  gated_norm_kernel<<<warps_blocks(out.count), kThreads, 0, stream>>>(x, gate, weight, out.cols, eps, false, out);
  return cudaGetLastError();
}

cudaError_t gated_group_rms_norm(RowsArg x, RowsArg gate, const float* weight, std::int64_t group_size, float eps,
                                 RowsArg out, cudaStream_t stream) {
  if (out.count == 0) return cudaSuccess;
  gated_norm_kernel<<<warps_blocks(out.count * (out.cols / group_size)), kThreads, 0, stream>>>(
      x, gate, weight, group_size, eps, true, out);
  return cudaGetLastError();
}

cudaError_t causal_conv1d(RowsArg x, const float* weight, const float* bias, int taps, StateArg state, SeqsArg seqs,
                          RowsArg out, cudaStream_t stream) {
  const std::int64_t tasks = seqs.num_seqs * x.cols;
  if (tasks == 0) return cudaSuccess;
  causal_conv1d_kernel<<<static_cast<unsigned>((tasks + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      x, weight, bias, taps, state, seqs, out);
  return cudaGetLastError();
}

cudaError_t gated_delta_rule(const DeltaRuleArgs& args, StateArg state, SeqsArg seqs, cudaStream_t stream) {
  const std::int64_t blocks = seqs.num_seqs * args.v.heads;
  if (blocks == 0) return cudaSuccess;
  gated_delta_rule_kernel<<<static_cast<unsigned>(blocks), threads_for(args.v.head_dim), 0, stream>>>(args, state,
                                                                                                        seqs);
  return cudaGetLastError();
}

cudaError_t ssd_recurrence(const SsdArgs& args, StateArg state, SeqsArg seqs, cudaStream_t stream) {
  const std::int64_t blocks = seqs.num_seqs * args.x.heads;
  if (blocks == 0) return cudaSuccess;
  ssd_recurrence_kernel<<<static_cast<unsigned>(blocks), threads_for(args.x.head_dim), 0, stream>>>(args, state, seqs);
  return cudaGetLastError();
}

}  // namespace baton::cuda
