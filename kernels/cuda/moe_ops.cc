#include "kernels/cuda/moe_ops.h"

#include <algorithm>
#include <climits>

#include "common/status.h"
#include "kernels/cuda/moe.cuh"
#include "kernels/cuda/tensor_args.h"

namespace baton::cuda_ops {
namespace {

// Per pair: expert_of, weight_of, source, row_of (4 bytes each) and one 16-byte tile (there are at
// most as many tiles as pairs).
constexpr std::size_t kRoutingBytesPerPair = 4 * sizeof(std::int32_t) + sizeof(cuda::GroupTile);
static_assert(sizeof(cuda::GroupTile) == 16, "tiles are 16 bytes");
constexpr std::int64_t kMinCapacity = 4096;

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Rows per grouped tile from the mean rows per used expert: decode batches spread over many
// experts (one row each), prefill piles several onto each. It sets only how many rows a warp
// accumulates at once, never a row's reduction order.
int rows_per_tile(std::int64_t pairs, std::int64_t num_experts) {
  const std::int64_t mean = (pairs + std::min(pairs, num_experts) - 1) / std::min(pairs, num_experts);
  return mean <= 1 ? 1 : mean <= 2 ? 2 : mean <= 4 ? 4 : 8;
}

// The most tiles a plan can need: sum over used experts of ceil(count / R).
std::int64_t max_tiles(std::int64_t pairs, std::int64_t num_experts, int r) {
  return (pairs + (r - 1) * std::min(pairs, num_experts) + r - 1) / r;
}

// The experts' weights all alike (the grouped linear reads them through one dtype and row stride).
void check_uniform(const std::vector<TensorView>& weights, std::int64_t rows, std::int64_t cols, const char* what) {
  const TensorView& first = weights.front();
  for (std::size_t e = 0; e < weights.size(); ++e) {
    const TensorView& w = weights[e];
    BATON_CHECK(w.ndim == 2 && w.dim(0) == rows && w.dim(1) == cols && w.stride(1) == 1 && w.dtype == first.dtype &&
                    w.stride(0) == first.stride(0),
                "moe ", what, " weight of expert ", e, " must be [", rows, ", ", cols, "] like expert 0's (",
                first.describe(), "): ", w.describe());
  }
  (void)weight_type(first, "moe expert weight");
}

void check_scratch(const TensorView& v, std::int64_t rows, std::int64_t cols, const char* what) {
  check_f32(v, what);
  BATON_CHECK(v.ndim == 2 && v.dim(0) >= rows && v.dim(1) == cols && v.stride(1) == 1, what, " must be F32 [>= ",
              rows, ", ", cols, "] with contiguous rows: ", v.describe());
}

}  // namespace

const MoeRunner::PointerTable* MoeRunner::table_for(const MoeExperts& experts) const {
  if (experts.gate_up.empty()) return nullptr;
  const auto it = tables_.find(experts.gate_up.front().data);
  if (it == tables_.end()) return nullptr;
  const std::vector<const void*>& host = it->second.host;
  const std::size_t n = experts.gate_up.size();
  if (host.size() != 2 * n) return nullptr;
  for (std::size_t e = 0; e < n; ++e) {
    if (host[e] != experts.gate_up[e].data || host[n + e] != experts.down[e].data) return nullptr;
  }
  return &it->second;
}

bool MoeRunner::ready(const MoeExperts& experts, std::int64_t tokens) const {
  return tokens * experts.top_k <= capacity_ && table_for(experts) != nullptr;
}

void MoeRunner::prepare(Backend& backend, const MoeExperts& experts, std::int64_t tokens) {
  BATON_CHECK(!experts.gate_up.empty() && experts.down.size() == experts.gate_up.size(),
              "moe: ", experts.gate_up.size(), " gate_up and ", experts.down.size(), " down weights");
  const std::int64_t pairs = tokens * experts.top_k;
  if (pairs > capacity_) {
    std::int64_t capacity = kMinCapacity;
    while (capacity < pairs) capacity *= 2;
    auto buffer = backend.allocate(static_cast<std::size_t>(capacity) * kRoutingBytesPerPair);
    BATON_CHECK(buffer.ok(), "moe routing tables for ", capacity, " pairs: ", buffer.status().ToString());
    if (routing_.data() != nullptr) retired_.push_back(std::move(routing_));
    routing_ = std::move(*buffer);
    capacity_ = capacity;
  }
  if (table_for(experts) == nullptr) {
    PointerTable table;
    for (const TensorView& w : experts.gate_up) table.host.push_back(w.data);
    for (const TensorView& w : experts.down) table.host.push_back(w.data);
    const std::size_t bytes = table.host.size() * sizeof(void*);
    auto buffer = backend.allocate(bytes);
    BATON_CHECK(buffer.ok(), "moe expert pointer table: ", buffer.status().ToString());
    table.device = std::move(*buffer);
    backend.copy_to_device(table.device.data(), table.host.data(), bytes);
    auto [it, inserted] = tables_.try_emplace(experts.gate_up.front().data);
    if (!inserted) retired_.push_back(std::move(it->second.device));
    it->second = std::move(table);
  }
}

void MoeRunner::run(Backend& backend, cudaStream_t stream, const TensorView& x, const TensorView& router_logits,
                    const MoeExperts& experts, const MoeScratch& scratch, const TensorView& out) {
  check_f32(x, "moe input");
  check_f32(out, "moe output");
  check_f32(router_logits, "moe router logits");
  const std::int64_t tokens = x.ndim == 2 ? x.dim(0) : -1, hidden = x.ndim == 2 ? x.dim(1) : -1;
  const auto num_experts = static_cast<std::int64_t>(experts.gate_up.size());
  const std::int32_t k = experts.top_k;
  BATON_CHECK(x.ndim == 2 && x.stride(1) == 1 && out.ndim == 2 && out.dim(0) == tokens && out.dim(1) == hidden &&
                  out.stride(1) == 1 && router_logits.ndim == 2 && router_logits.dim(0) == tokens &&
                  router_logits.dim(1) == num_experts && router_logits.stride(1) == 1 && k > 0 && k <= num_experts &&
                  num_experts <= cuda::kMaxExperts && experts.down.size() == experts.gate_up.size(),
              "moe shapes: x ", x.describe(), ", router logits ", router_logits.describe(), ", top_k ", k, ", ",
              num_experts, " experts (at most ", cuda::kMaxExperts, "), out ", out.describe());
  const std::int64_t inter = experts.gate_up.front().dim(0) / 2;
  check_uniform(experts.gate_up, 2 * inter, hidden, "gate_up");
  check_uniform(experts.down, hidden, inter, "down");
  const std::int64_t pairs = tokens * k;
  BATON_CHECK(pairs <= INT_MAX, "moe: ", pairs, " (token, expert) pairs exceed the row index type");
  check_scratch(scratch.rows, pairs, hidden, "moe scratch rows");
  check_scratch(scratch.gate_up, pairs, 2 * inter, "moe scratch gate_up");
  check_scratch(scratch.act, pairs, inter, "moe scratch act");
  check_scratch(scratch.out, pairs, hidden, "moe scratch out");
  const PointerTable* table = table_for(experts);
  BATON_CHECK(table != nullptr && pairs <= capacity_, "moe: run() before prepare() for ", pairs, " pairs");
  if (tokens == 0) return;

  auto* expert_of = static_cast<std::int32_t*>(routing_.data());
  auto* weight_of = reinterpret_cast<float*>(expert_of + capacity_);
  std::int32_t* source = expert_of + 2 * capacity_;
  std::int32_t* row_of = expert_of + 3 * capacity_;
  auto* tiles = reinterpret_cast<cuda::GroupTile*>(expert_of + 4 * capacity_);
  const int r = rows_per_tile(pairs, num_experts);
  const std::int64_t tile_count = max_tiles(pairs, num_experts, r);

  check_cuda(cuda::moe_route(rows(router_logits), static_cast<int>(num_experts), k, experts.normalize, expert_of,
                             weight_of, stream),
             "moe_route");
  check_cuda(cuda::moe_plan(expert_of, pairs, k, static_cast<int>(num_experts), r, tile_count, source, row_of, tiles,
                            stream),
             "moe_plan");
  backend.gather_rows(x, TensorView::contiguous(source, DType::kI32, {pairs}, backend.device()),
                      scratch.rows.slice0(0, pairs));

  const auto* weights = static_cast<const void* const*>(table->device.data());
  auto grouped = [&](const TensorView& in, const TensorView& first_weight, const void* const* expert_weights,
                     const std::vector<TensorView>& all, const TensorView& y, const char* what) {
    cuda::GroupedLinearArgs a;
    a.x = in.ptr<float>();
    a.ldx = in.stride(0);
    a.weights = expert_weights;
    a.w_type = weight_type(first_weight, what);
    a.ldw = first_weight.stride(0);
    const auto elem = static_cast<std::int64_t>(dtype_size(first_weight.dtype));
    a.weights_vec = (a.ldw * elem) % 16 == 0 &&
                    std::all_of(all.begin(), all.end(), [](const TensorView& w) { return aligned16(w.data); });
    a.y = y.ptr<float>();
    a.ldy = y.stride(0);
    a.n = first_weight.dim(0);
    a.k = first_weight.dim(1);
    a.tiles = tiles;
    a.max_tiles = tile_count;
    a.rows_per_tile = r;
    check_cuda(cuda::linear_grouped(a, stream), what);
  };
  grouped(scratch.rows, experts.gate_up.front(), weights, experts.gate_up, scratch.gate_up, "moe gate_up");
  backend.silu_mul(scratch.gate_up.slice0(0, pairs), scratch.act.slice0(0, pairs));
  grouped(scratch.act, experts.down.front(), weights + num_experts, experts.down, scratch.out, "moe down");

  // The shared expert and its gate, from x before out (which may alias it) is written.
  cuda::RowsArg shared_out{}, shared_logit{};
  if (!experts.shared_gate_up.empty()) {
    check_scratch(scratch.shared_out, tokens, hidden, "moe shared-expert scratch");
    BATON_CHECK(scratch.shared_logit.dim(0) >= tokens, "moe shared-expert gate scratch: ",
                scratch.shared_logit.describe());
    backend.linear(x, experts.shared_gate_up, TensorView{}, scratch.shared_gate_up.slice0(0, tokens));
    backend.silu_mul(scratch.shared_gate_up.slice0(0, tokens), scratch.shared_act.slice0(0, tokens));
    backend.linear(scratch.shared_act.slice0(0, tokens), experts.shared_down, TensorView{},
                   scratch.shared_out.slice0(0, tokens));
    backend.linear(x, experts.shared_gate, TensorView{}, scratch.shared_logit.slice0(0, tokens));
    shared_out = rows(scratch.shared_out.slice0(0, tokens));
    shared_logit = rows(scratch.shared_logit.slice0(0, tokens));
  }
  check_cuda(cuda::moe_combine(rows(scratch.out.slice0(0, pairs)), row_of, weight_of, k, shared_out, shared_logit,
                               rows(out), stream),
             "moe_combine");
}

void MoeRunner::clear() {
  tables_.clear();
  retired_.clear();
  routing_ = DeviceBuffer();
  capacity_ = 0;
}

}  // namespace baton::cuda_ops
