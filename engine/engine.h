// Engine: the model runtime's public API over one model, its KV cache, the scheduler, the sampler
// and (optionally) a speculative proposer. One step = schedule, one batched forward, verify or
// sample, check stops, propose the next drafts, report what each request gained.
//
// Roles (docs/engine.md, "Roles and the hand-off"):
//   colocated  add_request / step / abort: prefill and decode in this engine.
//   prefill    add_request with prefill_only: the request stops after its first token; its KV
//              (and its proposer's state) stay under a lease and its RequestOutput carries a
//              HandoffRecord; release() frees them once the transport is done.
//   decode     reserve() blocks for an incoming request under a lease; commit() its HandoffRecord
//              (after the transport copied the KV) and it continues decoding here. Requests added
//              with add_request run colocated (local prefill).
// A request's tokens depend only on model, prompt, sampling parameters, seed and speculative
// config: not on the batch, the token budget, other requests or where its prefill ran.
//
// Faults: an error in one request's proposer or state finishes that request (reason kError, with
// a message); the step goes on for the others. Nothing leaks: every path returns its blocks.
//
// The engine never sees networking, tokenizers or text formats: text comes in through an
// optional TextDecoderFactory (for stop strings and streamed text). Not thread-safe: one thread
// owns an Engine (EngineLoop runs one on its own thread for servers).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/handoff.h"
#include "engine/kv/block_pool.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/kv_host_mirror.h"
#include "engine/kv/layout_fingerprint.h"
#include "engine/kv/state_cache.h"
#include "engine/model/transformer.h"
#include "engine/request.h"
#include "engine/sample/sampler.h"
#include "engine/scheduler.h"
#include "engine/spec/config.h"
#include "engine/spec/speculator.h"
#include "engine/step_batch.h"
#include "kernels/backend.h"

namespace baton {

// Whether decode and verification forwards replay captured graphs (engine/model/forward_graphs.h).
enum class GraphMode {
  kAuto,  // where they pay: a CUDA device
  kOn,    // wherever the backend captures them (the CPU too, for tests)
  kOff,   // every forward op by op (vLLM's --enforce-eager)
};

struct EngineConfig {
  std::string model_dir;
  std::optional<DType> dtype;          // weight dtype override; nullopt: as stored
  BackendOptions backend;
  std::int32_t block_size = 16;
  std::int64_t kv_cache_bytes = 1LL << 30;
  // Set: the target pool holds at most this many tokens (rounded up to whole blocks; never more
  // than kv_cache_bytes holds), and the proposers' pools follow. For one-shot runs that know their
  // requests (baton generate): the pools are committed at start, and 1 GiB costs seconds.
  std::optional<std::int64_t> kv_cache_tokens;
  // The KV cache's element type (target and draft pools); nullopt: the backend's activation dtype.
  // BF16 holds twice the tokens in the same bytes, its values rounded as they are stored.
  std::optional<DType> kv_cache_dtype;
  std::int32_t max_model_len = 0;      // 0: the model's max_position_embeddings, capped by the cache
  SchedulerConfig scheduler;
  // Draws the seeds of requests that bring none. nullopt: a value from the operating system's
  // entropy, so that unseeded requests are not predictable from a restart.
  std::optional<std::uint64_t> seed;
  std::optional<SpeculativeConfig> speculative;  // nullopt: no speculative decoding
  GraphMode graphs = GraphMode::kAuto;
  std::int32_t graph_max_batch_size = 0;  // largest padded batch in a graph; 0: min(max_num_seqs, 256)
  // The node role this engine serves; its speculative config must obey the P/D rule for it
  // (checked at create() with num_speculative_tokens resolved, e.g. MTP's default).
  NodeRole role = NodeRole::kColocated;
  // How long a prefilled request's KV (prefill role) or a reservation (decode role) is held
  // without release or commit before the engine reclaims it.
  std::chrono::milliseconds handoff_lease{60000};
  // Decode role: the longest a reservation stays quarantined (see grant_writes()) when neither
  // its writer's end_writes() nor proof that the writer is gone arrives; its blocks are then
  // reclaimed with an error in the log, since a writer that wakes up later could still write them.
  std::chrono::milliseconds write_quarantine_limit{600000};
  // TESTING ONLY: verify drafts with a deliberately lossy rejection sampler
  // (spec/broken_rejection_sampler.h), the negative control of `baton verify-lossless`.
  bool testing_broken_rejection_sampler = false;
  // Where the memory transports use comes from (a decode node hands in its KV transport's
  // allocator): the KV pools' own on a backend whose memory the host reads, else their host
  // mirrors' (see kv_pools()); null: the backend allocates it.
  std::shared_ptr<KvMemoryProvider> kv_memory;
  // KV transports read and write the pools themselves, in device memory (the NCCL link), instead
  // of host mirrors on a backend whose memory the host cannot read. The layer callback then hears
  // of a layer once the device has written it (the next layer is queued by then), and commit()
  // copies nothing: the transport wrote the reservation's blocks in place, and reported only once
  // its writes had completed.
  bool kv_transfer_in_device_memory = false;
};

// Hooks for tests and embedding: a clock (leases), the clock that times verify forwards and
// proposals for adaptive_draft_length (a test's own costs make its choices reproducible), and a
// wrapper around the proposer (fault injection). Defaults: the steady clock for both, the proposer
// as configured.
struct EngineHooks {
  std::function<EngineClock::time_point()> clock;
  std::function<std::chrono::steady_clock::time_point()> step_clock;
  std::function<std::unique_ptr<Proposer>(std::unique_ptr<Proposer>)> wrap_proposer;
};

using TextDecoderFactory = std::function<std::unique_ptr<TextDecoder>()>;

struct TokenOutput {
  std::int32_t token = 0;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top_logprobs;  // when the request asked for logprobs
};

// What one request gained in one step.
struct RequestOutput {
  std::string request_id;
  std::vector<TokenOutput> new_tokens;
  std::string new_text;  // newly visible text (with a TextDecoderFactory)
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;  // finish_reason kError: what went wrong
  std::optional<std::int32_t> stop_token;
  std::optional<std::string> stop_string;
  std::int32_t num_prompt_tokens = 0;
  std::int32_t num_cached_prompt_tokens = 0;
  std::int32_t num_output_tokens = 0;
  RequestSpecCounts spec;  // this request's speculation so far (on this engine)
  // extract_hidden_states: the safetensors file of the prompt's hidden states, complete once set
  // (set from the step that computed the prompt's last position; vLLM's
  // kv_transfer_params.hidden_states_path).
  std::string hidden_states_path;
  // Prefill role: the request is prefilled and parked under a lease; send this to the decode
  // engine, then release() it. Not finished: its KV is still held.
  std::optional<HandoffRecord> handoff;
  // For TTFT / TPOT / end-to-end latency, on this engine's clock: arrival is add_request (or
  // commit); first-token and finish times are when step() returned them (zero until then).
  EngineClock::time_point arrival_time{};
  EngineClock::time_point first_token_time{};
  EngineClock::time_point finish_time{};
};

struct AddRequestOptions {
  bool prefill_only = false;  // prefill role (required there)
  // The prefix cache shares blocks only between requests with the same salt (vLLM's cache_salt;
  // the router gives each API key its own, so that cached_tokens tells nothing across keys).
  std::uint64_t cache_salt = 0;
};

// Counters since the engine started (for metrics and the CLI's speed report).
struct EngineStats {
  std::int64_t steps = 0;
  std::int64_t prompt_tokens_computed = 0;  // prefill work (prompt tokens, excluding cache hits)
  std::int64_t output_tokens = 0;
  std::int64_t preemptions = 0;
  std::int64_t prefix_cache_queries = 0;
  std::int64_t prefix_cache_hits = 0;       // in blocks
  std::int64_t request_faults = 0;          // requests finished with kError
  std::int64_t handoffs_exported = 0;       // prefill role
  std::int64_t handoffs_committed = 0;      // decode role
  std::int64_t lease_expiries = 0;          // prefilled KV or reservations reclaimed by deadline
  std::int64_t write_quarantines = 0;       // decode role: reservations that ended while a writer held a grant
  std::int64_t write_quarantines_expired = 0;  // of those: reclaimed at write_quarantine_limit, not by end_writes()
  double forward_seconds = 0;
};

// One pool's memory and usage: the target's KV, then the proposer's KV if it has one, then a
// hybrid model's recurrent state ("state": its units are state groups' slots, its "blocks" groups).
// Nodes address pools by index in this order; both sides of a hand-off list them alike (their
// layout fingerprints matched).
struct KvPoolInfo {
  std::string name;  // "target", "draft", "state"
  KvCache* cache = nullptr;          // a KV pool's; null for "state"
  const StateCache* state = nullptr;  // "state" only
  PoolGeometry geometry;             // the transfer region as (layer, unit) spans
  // The memory KV transports read (prefill role) or write (decode role), at the pool's offsets:
  // the pool itself where the host reads the backend's memory or the transports move device
  // memory (EngineConfig::kv_transfer_in_device_memory), else the pool's host
  // mirror (engine/kv/kv_host_mirror.h), which the engine keeps in step with the pool: a layer's
  // written rows are in it when the layer callback reports them, a hand-off's prefix-cache and
  // proposer blocks when the record is handed out, and commit() moves the reservation's blocks
  // from it into the pool.
  KvRegion transfer;
  std::int32_t num_blocks = 0;  // of "state": groups (one per running request)
  std::int32_t used = 0;      // held by requests (running, parked or reserved)
  std::int32_t free = 0;      // allocatable (free + evictable prefix-cache blocks)
  std::int32_t cached = 0;    // of free: evictable prefix-cache blocks
  std::int32_t reserved = 0;  // of used: held for hand-offs (reservations and parked prefills); not the draft pool
  std::int32_t quarantined = 0;  // of used: of ended reservations a writer may still write (grant_writes())
};

// Where a write grant (Engine::grant_writes) stands.
enum class WriteGrantState {
  kNone,         // unknown ticket, or ended: nothing is held for it
  kReserved,     // its reservation is live (waiting for the commit)
  kQuarantined,  // its reservation ended before the writer did: the blocks are held, unusable
};

// A step's KV writes of one layer, for transports (prefill role: push layer i while i+1 computes).
struct KvLayerWrite {
  const std::string* request_id = nullptr;
  std::int32_t start = 0;       // first position written
  std::int32_t num_tokens = 0;  // positions [start, start + num_tokens)
  std::span<const BlockId> blocks;  // the request's block table (target pool)
};
using KvLayerCallback = std::function<void(std::int32_t layer, std::span<const KvLayerWrite> writes)>;

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> create(const EngineConfig& config, EngineHooks hooks = {});
  ~Engine();

  // Validates and queues a request. Errors name the field (InvalidArgument) or say the request can
  // never fit (e.g. longer than max_model_len); the engine is unchanged on error.
  absl::Status add_request(const std::string& id, std::vector<std::int32_t> prompt, const SamplingParams& params,
                           const AddRequestOptions& options = {});
  // One scheduling step (after reclaiming expired leases). Returns the requests that gained
  // tokens, finished, were prefilled for a hand-off, or were aborted since the last step.
  absl::StatusOr<std::vector<RequestOutput>> step();
  // Finishes a request (reason abort) wherever it is — queued, running, prefilled or reserved —
  // and frees its blocks; its final output comes with the next step(). Unknown ids are ignored.
  void abort(const std::string& id);

  // ---- decode role -------------------------------------------------------------------------
  // Holds blocks for a prompt of prompt_len tokens (and the proposer's share) until commit(),
  // release() or the lease ends. ResourceExhausted when they are not free now.
  absl::StatusOr<KvReservation> reserve(const std::string& id, std::int32_t prompt_len);
  // Admits a reserved request straight into decoding; the transport has copied the KV of the
  // record's blocks into the reservation's. Errors name what does not match; the reservation is
  // released on error.
  absl::Status commit(const std::string& id, const HandoffRecord& record);
  // Frees a prefilled request's KV (prefill role) or a reservation (decode role).
  absl::Status release(const std::string& id);
  // Write grants: a sender outside this process (a prefill node's UCX puts) was allowed to write
  // reservation `id`'s blocks, and such writes cannot be revoked. Until end_writes(ticket), a
  // release, abort or lease expiry of the reservation only quarantines its blocks (target and
  // proposer): the request is gone (its id is free again, a commit finds nothing) but the blocks
  // stay held, so that no other request reuses memory the writer may still write. A commit ends
  // the grant (the sender commits once its writes are complete). `ticket` is the caller's, > 0.
  absl::Status grant_writes(const std::string& id, std::uint64_t ticket);
  // The writer of `ticket` has stopped (it said so, or it is gone): a quarantine frees its
  // blocks, a live reservation just loses the grant. Unknown tickets are ignored.
  void end_writes(std::uint64_t ticket);
  WriteGrantState write_grant_state(std::uint64_t ticket) const;

  // True while requests are queued, running, parked or reserved.
  bool has_unfinished() const { return !requests_.empty() || !pending_outputs_.empty(); }
  // True when step() has something to do now (a loop can block otherwise, until next_deadline()).
  bool has_work() const { return scheduler_->has_work() || !pending_outputs_.empty(); }
  // The earliest lease deadline, if any request is parked or reserved (or blocks are quarantined).
  std::optional<EngineClock::time_point> next_deadline() const;

  void set_text_decoder_factory(TextDecoderFactory factory) { decoder_factory_ = std::move(factory); }
  // Each token id's bytes (Tokenizer::token_bytes()), which constrained output (a request's
  // response_format) needs for its token masks; without them such requests are refused.
  void set_token_bytes(const std::vector<std::string>& bytes);
  // Called for every target forward, layer by layer (see KvLayerWrite), once the layer's bytes
  // can be read in the pools' transfer regions (on a device the host cannot read, one layer behind
  // the forward: the layer's rows have come down to the mirror, or been written in device memory).
  void set_kv_layer_callback(KvLayerCallback callback) { layer_callback_ = std::move(callback); }

  const ModelConfig& model_config() const { return model_->config(); }
  const Transformer& model() const { return *model_; }
  const Backend& backend() const { return *backend_; }
  std::int32_t max_model_len() const { return max_model_len_; }
  // The most requests one step runs (the scheduler's max_num_seqs).
  std::int32_t max_num_seqs() const { return config_.scheduler.max_num_seqs; }
  const EngineStats& stats() const { return stats_; }
  const KvBlockPool& block_pool() const { return *pool_; }
  // Hybrid models' recurrent state groups and their memory (nullptr for other models). A
  // transport moves a hand-off's state with StateCache::span() (HandoffRecord, KvReservation).
  const StateGroupPool* state_groups() const { return state_groups_.get(); }
  const StateCache* state_cache() const { return state_cache_.get(); }
  // The speculative config in effect (num_speculative_tokens resolved); nullptr without one.
  const SpeculativeConfig* speculative_config() const { return speculator_ ? &speculator_->config() : nullptr; }
  // Speculative decoding counters; nullptr when the engine runs without speculation.
  const SpecDecodeStats* spec_stats() const { return speculator_ ? &speculator_->stats() : nullptr; }
  // The target model's forwards: captured graphs, replays, eager runs.
  const GraphStats& graph_stats() const { return model_->graph_stats(); }
  // The largest padded batch replayed from a graph; 0 when graphs are off.
  std::int32_t graph_max_batch_size() const { return model_->options().graph_max_seqs; }
  std::size_t num_waiting() const { return scheduler_->num_waiting(); }
  std::size_t num_running() const { return scheduler_->num_running() + scheduler_->num_ready(); }
  std::vector<KvPoolInfo> kv_pools() const;
  // True when KV transports use host mirrors of the pools (KvPoolInfo::transfer).
  bool kv_host_mirrored() const { return !mirrors_.empty(); }
  KvLayoutFingerprint layout_fingerprint() const;
  std::string describe() const;

 private:
  Engine() = default;
  EngineClock::time_point now() const { return hooks_.clock ? hooks_.clock() : EngineClock::now(); }
  Request* find(const std::string& id) const;
  RequestOutput& output_for(Request* r, std::vector<RequestOutput>& outs);
  // Appends tokens one by one, stopping at the first that finishes the request; returns how many
  // were appended.
  std::size_t append_tokens(Request* r, std::span<const std::int32_t> tokens, std::span<const SampleResult> logprobs,
                            RequestOutput& o);
  void fill_counts(const Request* r, RequestOutput& o) const;
  void finish(Request* r, FinishReason reason);
  void fail(Request* r, const absl::Status& why, std::vector<RequestOutput>& outs);
  void fail(Request* r, const absl::Status& why, RequestOutput& o);
  // r's OutputConstraint from its params.response_format, fed r's output so far.
  absl::Status constrain(Request& r);
  void drop(Request* r);  // forgets a request that holds nothing any more
  void register_final_blocks(Request* r);

  // Step phases.
  void expire_leases(std::vector<RequestOutput>& outs);
  void propose_pending(std::vector<RequestOutput>& outs);
  absl::StatusOr<bool> run_forward(const SchedulerOutput& plan, std::vector<RequestOutput>& outs);
  void process_chunk(const ScheduledChunk& c, std::size_t index, std::vector<RequestOutput>& outs);
  // How chunk c's token(s) are picked where the logits are (Backend::argmax_rows / sample_rows),
  // or temperature -1 when the host must read its rows (logprobs, penalties, probabilistic drafts,
  // a sampled request on a backend that does not sample).
  SampleRowParams device_pick(const ScheduledChunk& c) const;
  // speculator_->observe, timed as proposer work when the step profile is on.
  absl::Status observe(Request& r, std::int32_t start, const TargetStateRows& rows, std::int32_t num_tokens,
                       std::int32_t num_valid);
  void park_prefilled(std::vector<RequestOutput>& outs);
  absl::StatusOr<HandoffRecord> make_handoff(Request* r);
  void release_held(Request* r);
  // release_held() of a reservation under a write grant: keeps its blocks until end_writes().
  void quarantine(Request* r);
  void free_quarantined(Request& r);
  // Gives a held request's recurrent state group back (hybrid models; nothing otherwise).
  void free_state(Request& r);
  // Captures the target's decode and verification graphs for every batch bucket (engine_graphs.cc).
  absl::Status capture_step_graphs();
  // Host mirrors of the KV pools (prefill and decode roles on a backend whose memory the host
  // cannot read; see KvPoolInfo::transfer). Layer i's written rows go down while layer i + 1 is
  // enqueued, and the callback hears of layer i once they have landed (without mirrors, with
  // kv_transfer_in_device_memory: once the device has written them).
  void stage_layer(std::int32_t layer);
  void report_staged_layer();
  void download_whole_blocks(const HandoffRecord& h);
  void upload_reserved(const Request& r);

  EngineConfig config_;
  EngineHooks hooks_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Transformer> model_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<KvBlockPool> pool_;
  // Hybrid models: the recurrent state of their linear-attention layers, a group per running request.
  std::unique_ptr<StateCache> state_cache_;
  std::unique_ptr<StateGroupPool> state_groups_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<Speculator> speculator_;
  Sampler sampler_;
  StepBatch step_batch_;
  std::mt19937_64 seed_source_{0};  // seeds for requests without one
  std::int32_t max_model_len_ = 0;
  std::unordered_map<std::string, std::unique_ptr<Request>> requests_;
  std::unordered_map<Request*, std::size_t> output_index_;  // this step's outputs, by request
  std::vector<Request*> first_token_now_;                     // got their first token this step
  std::vector<RequestOutput> pending_outputs_;  // final outputs of aborts and expiries between steps
  TextDecoderFactory decoder_factory_;
  std::shared_ptr<const structured::TokenMasker> token_masker_;  // set_token_bytes()'s
  // Compiled response formats by their text (a few kept: clients repeat theirs).
  std::unordered_map<std::string, std::shared_ptr<const structured::Grammar>> grammars_;
  KvLayerCallback layer_callback_;
  std::vector<KvLayerWrite> layer_writes_;
  std::vector<KvHostMirror> mirrors_;  // by pool index (target, draft); empty: transports use the pools
  std::vector<KvSpan> mirror_spans_;   // reused
  std::int32_t staged_layer_ = -1;     // downloaded, not yet reported to the layer callback
  std::uint64_t staged_fence_ = 0;
  std::vector<SampleRowParams> device_picks_;  // run_forward()'s device_pick() per chunk, reused
  std::vector<Request*> want_drafts_;  // propose_pending()'s list, reused from step to step
  EngineStats stats_;
  std::uint64_t next_key_ = 1;
  std::int32_t num_held_ = 0;  // requests parked (prefill) or reserved (decode)
  // Ended reservations whose writer may still write them, by grant ticket; lease_deadline is the
  // quarantine's limit.
  std::map<std::uint64_t, std::unique_ptr<Request>> quarantined_;
};

}  // namespace baton
