// Baton's metric names: vLLM's (its `vllm:` metric names) with the `baton_` prefix, and the labels every
// series carries: method (speculative method, "none" without speculation), role (router, prefill,
// decode, both, proposer) and node (the process's gRPC address).
//
// Must not: be spelled anywhere else — dashboards and tests read them from here or from docs.
#pragma once

namespace baton::metrics {

// Speculative decoding (decode nodes).
inline constexpr const char* kSpecDrafts = "baton_spec_decode_num_drafts_total";
inline constexpr const char* kSpecDraftTokens = "baton_spec_decode_num_draft_tokens_total";
inline constexpr const char* kSpecAcceptedTokens = "baton_spec_decode_num_accepted_tokens_total";
inline constexpr const char* kSpecAcceptedPerPos = "baton_spec_decode_num_accepted_tokens_per_pos_total";
// Baton's own: proposals by the draft length asked for ({length}; adaptive_draft_length).
inline constexpr const char* kSpecProposalsByLength = "baton_spec_decode_proposals_by_length_total";

// Engine state and work (prefill and decode nodes).
inline constexpr const char* kRequestsRunning = "baton_num_requests_running";
inline constexpr const char* kRequestsWaiting = "baton_num_requests_waiting";
inline constexpr const char* kQueuedPrefillTokens = "baton_queued_prefill_tokens";
inline constexpr const char* kKvBlocks = "baton_kv_cache_blocks";            // {pool, state}
inline constexpr const char* kKvUsage = "baton_kv_cache_usage_perc";         // {pool}
inline constexpr const char* kPromptTokens = "baton_prompt_tokens_total";
inline constexpr const char* kGenerationTokens = "baton_generation_tokens_total";
inline constexpr const char* kPreemptions = "baton_num_preemptions_total";
inline constexpr const char* kLeaseExpiries = "baton_lease_expiries_total";
inline constexpr const char* kWriteQuarantines = "baton_kv_write_quarantines_total";
inline constexpr const char* kWriteQuarantinesExpired = "baton_kv_write_quarantines_expired_total";
inline constexpr const char* kRequestFaults = "baton_request_faults_total";
inline constexpr const char* kPrefixCacheQueries = "baton_prefix_cache_queries_total";
inline constexpr const char* kPrefixCacheHits = "baton_prefix_cache_hits_total";
inline constexpr const char* kLocalPrefills = "baton_local_prefill_fallbacks_total";
inline constexpr const char* kGraphReplays = "baton_graph_replays_total";
inline constexpr const char* kNodeSnapshotAge = "baton_node_snapshot_age_seconds";

// KV transfer (prefill nodes, the sending side).
inline constexpr const char* kKvTransferBytes = "baton_kv_transfer_bytes_total";
inline constexpr const char* kKvTransferSeconds = "baton_kv_transfer_seconds";
inline constexpr const char* kKvTransferFailures = "baton_kv_transfer_failures_total";  // {stage}

// Requests as the router saw them.
inline constexpr const char* kTimeToFirstToken = "baton_time_to_first_token_seconds";
inline constexpr const char* kTimePerOutputToken = "baton_request_time_per_output_token_seconds";
inline constexpr const char* kInterTokenLatency = "baton_inter_token_latency_seconds";
inline constexpr const char* kE2eLatency = "baton_e2e_request_latency_seconds";
inline constexpr const char* kRequestSuccess = "baton_request_success_total";  // {finished_reason}
inline constexpr const char* kRouterRequestsRunning = "baton_router_requests_running";
// The phases of a request (vLLM's request_*_time_seconds, plus the hand-off's KV transfer).
inline constexpr const char* kRequestQueueTime = "baton_request_queue_time_seconds";
inline constexpr const char* kRequestPrefillTime = "baton_request_prefill_time_seconds";
inline constexpr const char* kRequestKvTransferTime = "baton_request_kv_transfer_time_seconds";
inline constexpr const char* kRequestDecodeTime = "baton_request_decode_time_seconds";

// Proposer sidecar (decode nodes, the client side).
inline constexpr const char* kProposerRoundTrip = "baton_proposer_round_trip_seconds";
inline constexpr const char* kProposerBudgetMisses = "baton_proposer_budget_misses_total";
inline constexpr const char* kProposerFallbackSteps = "baton_proposer_fallback_steps_total";
inline constexpr const char* kProposerReconnects = "baton_proposer_reconnects_total";
inline constexpr const char* kProposerConnected = "baton_proposer_connected";

}  // namespace baton::metrics
