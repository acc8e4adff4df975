// Running requests through a prefill engine and a decode engine in one process, the way the
// nodes will: reserve on D, prefill on P with a layer-by-layer copy of the target KV (the engine's
// per-layer callback), then the proposer's KV and a hybrid's recurrent state, commit on D, release
// on P. The "transport" is a
// memcpy between the two engines' registered pool regions, addressed only through what the
// engines expose (regions, (layer, block) spans, block ids in the reservation and the record),
// so it checks that API as a real transport would use it.
#pragma once

#include <cstring>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/engine.h"
#include "tests/engine/engine_jobs.h"

namespace baton::testing {

// The pool called `name` of an engine (the target's or the proposer's).
inline KvPoolInfo pool_named(const Engine& e, const std::string& name) {
  for (const KvPoolInfo& p : e.kv_pools()) {
    if (p.name == name) return p;
  }
  BATON_CHECK(false, "engine has no KV pool named ", name);
  return {};
}

// Moves bytes between two engines' transfer regions: memcpy for host memory; a test whose regions
// are device memory passes a device copy that has completed when it returns.
using ByteCopy = std::function<void(void* dst, const void* src, std::size_t bytes)>;
inline void host_copy(void* dst, const void* src, std::size_t bytes) { std::memcpy(dst, src, bytes); }

// Copies (layer, block) spans from src's pool to dst's, block ids paired by index.
inline void copy_blocks(const KvPoolInfo& src, std::span<const BlockId> src_blocks, const KvPoolInfo& dst,
                        std::span<const BlockId> dst_blocks, std::int32_t first_layer, std::int32_t last_layer,
                        const ByteCopy& copy = host_copy) {
  BATON_CHECK(src_blocks.size() <= dst_blocks.size(), src_blocks.size(), " source blocks for ", dst_blocks.size());
  const KvRegion from = src.transfer, to = dst.transfer;
  for (std::int32_t layer = first_layer; layer <= last_layer; ++layer) {
    for (std::size_t i = 0; i < src_blocks.size(); ++i) {
      const KvSpan a = src.cache->span(layer, src_blocks[i]);
      const KvSpan b = dst.cache->span(layer, dst_blocks[i]);
      BATON_CHECK(a.bytes == b.bytes, "span sizes differ");
      copy(static_cast<char*>(to.base) + b.offset, static_cast<const char*>(from.base) + a.offset, a.bytes);
    }
  }
}

// Fills every pool of an engine, and its host mirror where it has one, with NaN bytes, so KV that
// was never transferred (or never moved between a pool and its mirror) cannot pass. Needs pools
// the host can write: the CPU backend's, discrete-memory test mode included.
inline void poison_pools(Engine& e) {
  for (const KvPoolInfo& p : e.kv_pools()) {
    std::memset(p.transfer.base, 0xff, p.transfer.bytes);  // the recurrent state's pool too
    if (p.cache != nullptr) std::memset(p.cache->region().base, 0xff, p.cache->region().bytes);
  }
}

// A hybrid model's recurrent state after the prompt: its slot of P's group, every recurrent
// layer, into the same slot of D's reserved group.
inline void copy_state(const Engine& p, const HandoffRecord& h, const Engine& d, const KvReservation& r,
                       const ByteCopy& copy = host_copy) {
  const StateCache* from = p.state_cache();
  const StateCache* to = d.state_cache();
  if (from == nullptr) return;
  BATON_CHECK(to != nullptr && h.state_group >= 0 && r.state_group >= 0, "a hybrid hand-off without state groups");
  for (std::int32_t layer = 0; layer < from->layout().num_layers; ++layer) {
    const KvSpan a = from->span(layer, h.state_group, h.state_slot);
    const KvSpan b = to->span(layer, r.state_group, h.state_slot);
    BATON_CHECK(a.bytes == b.bytes, "state slot sizes differ");
    copy(static_cast<char*>(to->region().base) + b.offset, static_cast<const char*>(from->region().base) + a.offset,
         a.bytes);
  }
}

// Runs the jobs disaggregated and returns each request's tokens (the first from P, the rest from
// D). All are submitted at once, or with `one_at_a_time` each after the previous one's hand-off
// (so later prompts can hit P's prefix cache). `after_handoff` runs after each commit on D; `copy`
// moves the bytes.
inline std::map<std::string, std::vector<std::int32_t>> run_disaggregated(
    Engine& p, Engine& d, const std::vector<Job>& jobs, bool one_at_a_time = false,
    const std::function<void()>& after_handoff = nullptr, const ByteCopy& copy = host_copy) {
  const absl::Status compatible = d.layout_fingerprint().check_compatible(p.layout_fingerprint());
  BATON_CHECK(compatible.ok(), compatible.ToString());
  std::map<std::string, KvReservation> reservations;
  const auto submit = [&](const Job& j) {
    auto r = d.reserve(j.id, static_cast<std::int32_t>(j.prompt.size()));
    BATON_CHECK(r.ok(), r.status().ToString());
    reservations.emplace(j.id, std::move(*r));
    AddRequestOptions o;
    o.prefill_only = true;
    const absl::Status s = p.add_request(j.id, j.prompt, j.params, o);
    BATON_CHECK(s.ok(), s.ToString());
  };
  std::size_t submitted = 0;
  if (!one_at_a_time) {
    for (const Job& j : jobs) submit(j);
    submitted = jobs.size();
  }
  const KvPoolInfo p_target = pool_named(p, "target"), d_target = pool_named(d, "target");
  const std::int32_t bs = p_target.cache->layout().block_size;
  // Layer i of each prefill chunk goes as soon as it is written.
  p.set_kv_layer_callback([&](std::int32_t layer, std::span<const KvLayerWrite> writes) {
    for (const KvLayerWrite& w : writes) {
      const KvReservation& r = reservations.at(*w.request_id);
      const std::int32_t first = w.start / bs, last = (w.start + w.num_tokens - 1) / bs;
      for (std::int32_t b = first; b <= last && b < static_cast<std::int32_t>(r.kv_blocks.size()); ++b) {
        copy_blocks(p_target, w.blocks.subspan(static_cast<std::size_t>(b), 1), d_target,
                    std::span<const BlockId>(r.kv_blocks).subspan(static_cast<std::size_t>(b), 1), layer, layer, copy);
      }
    }
  });
  std::map<std::string, std::vector<std::int32_t>> out;
  while (submitted < jobs.size() || p.has_unfinished()) {
    if (!p.has_unfinished()) submit(jobs[submitted++]);
    auto outs = p.step();
    BATON_CHECK(outs.ok(), outs.status().ToString());
    for (RequestOutput& o : *outs) {
      for (const TokenOutput& t : o.new_tokens) out[o.request_id].push_back(t.token);
      if (o.handoff) {
        const KvReservation& r = reservations.at(o.request_id);
        // Blocks the prefill took from its prefix cache were never written by this request's
        // forward, so the layer callback did not send them: they go now, every layer.
        const auto cached = static_cast<std::size_t>(o.handoff->num_cached_prompt_tokens / bs);
        copy_blocks(p_target, std::span<const BlockId>(o.handoff->kv_blocks).first(cached), d_target,
                    r.kv_blocks, 0, p_target.cache->layout().num_layers - 1, copy);
        if (!o.handoff->proposer.kv_blocks.empty()) {
          const KvPoolInfo p_draft = pool_named(p, "draft"), d_draft = pool_named(d, "draft");
          copy_blocks(p_draft, o.handoff->proposer.kv_blocks, d_draft, r.proposer_blocks, 0,
                      p_draft.cache->layout().num_layers - 1, copy);
        }
        copy_state(p, *o.handoff, d, r, copy);
        const absl::Status c = d.commit(o.request_id, *o.handoff);
        BATON_CHECK(c.ok(), c.ToString());
        BATON_CHECK(p.release(o.request_id).ok(), "release");
        if (after_handoff) after_handoff();
      } else if (o.finished) {
        BATON_CHECK(d.release(o.request_id).ok(), "release of ", o.request_id, " on D");
      }
    }
  }
  p.set_kv_layer_callback(nullptr);
  while (d.has_unfinished()) {
    auto outs = d.step();
    BATON_CHECK(outs.ok(), outs.status().ToString());
    for (const RequestOutput& o : *outs) {
      for (const TokenOutput& t : o.new_tokens) out[o.request_id].push_back(t.token);
    }
  }
  return out;
}

}  // namespace baton::testing
