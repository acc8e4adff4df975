// Counters of what the router did, read by tests and (later) exported as metrics. Every fallback to
// local prefill is counted here and logged where it happens: never silent.
//
// Thread-safety: atomics, updated from request threads with relaxed ordering. Must not: hold
// anything but counters.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace baton::router {

// The states of a request in the router (request_flow.h draws the machine): the front end has it
// (received), waits for room (queued), runs it (admitted, then per attempt reserving on D,
// prefilling on P, streaming D's tokens) and ends it (finished: the client got its last message;
// failed: an error status).
enum class RequestState : int { kReceived, kQueued, kAdmitted, kReserving, kPrefilling, kStreaming, kFinished, kFailed };
inline constexpr std::size_t kRequestStates = 8;
inline const char* state_name(RequestState s) {
  static constexpr const char* kNames[kRequestStates] = {"received",   "queued",    "admitted", "reserving",
                                                         "prefilling", "streaming", "finished", "failed"};
  return kNames[static_cast<int>(s)];
}

struct RouterStats {
  std::atomic<std::int64_t> requests{0};           // Generate calls whose prompt was accepted
  std::atomic<std::int64_t> requests_failed{0};    // ended with an error status
  std::atomic<std::int64_t> requests_aborted{0};   // Abort RPC, client gone or deadline
  std::atomic<std::int64_t> disaggregated{0};      // attempts prefilled on a prefill node
  std::atomic<std::int64_t> local_prefill_forced{0};         // request.force_local_prefill
  std::atomic<std::int64_t> local_prefill_short_prompt{0};   // prompt <= --local-prefill-max-tokens
  std::atomic<std::int64_t> local_prefill_no_prefill_node{0};  // no usable prefill node
  std::atomic<std::int64_t> retries{0};            // second attempts after a failure before the first token
  std::atomic<std::int64_t> calls_stalled{0};      // node calls ended for want of progress (call_watchdog.h)
  std::atomic<std::int64_t> calls_node_unreachable{0};  // node calls ended: their node stopped answering
  std::atomic<std::int64_t> node_aborts_sent{0};
  std::atomic<std::int64_t> node_releases_sent{0};
  // Transitions into each state (a retried attempt enters reserving/prefilling/streaming again).
  std::array<std::atomic<std::int64_t>, kRequestStates> entered{};

  void enter(RequestState s) { entered[static_cast<std::size_t>(s)].fetch_add(1, std::memory_order_relaxed); }
};

}  // namespace baton::router
