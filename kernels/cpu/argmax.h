// The greedy pick of one row of logits: the lowest index of its largest entry. Host code on f32
// rows, shared by the CPU backend's argmax_rows() and the engine's sampler (which picks on rows
// it has processed on the host), so both pick by the same rule.
//
// Must not: allocate, or read past the row. Comparisons only: the result is exact, the same on
// every ISA and for every batch.
#pragma once

#include <cstddef>
#include <optional>
#include <span>

namespace baton::cpu {

// The lowest index of the largest entry (-0 and +0 tie, so the first wins; a row of -inf gives 0),
// or nullopt when the row has a NaN. v must not be empty.
std::optional<std::size_t> argmax_lowest(std::span<const float> v);

}  // namespace baton::cpu
