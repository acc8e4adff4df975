// SuffixTree costs on synthetic responses that repeat one another (as agent and code workloads do):
// per-token extend time of a local tree (one growing sequence, a token per call as the proposer
// feeds it), of a global tree fed by B responses growing interleaved under a FIFO cap of C
// responses (as SuffixProposer now feeds it), per-token removal time, speculate() time and the
// global tree's peak size. One JSON line; no model needed.
//
//   suffix_tree_bench [--responses N] [--len L] [--concurrent B] [--cap C] [--depth D] [--sequential]
//
// --sequential grows one response at a time (B = 1), the only order trees before interleaved
// growth supported, for comparing against them.
#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "engine/spec/suffix_tree.h"

namespace {

using Tokens = std::vector<std::int32_t>;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Responses made of spans copied from earlier responses (half the time) and Zipf-like fresh tokens.
std::vector<Tokens> make_responses(int n, int len, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Tokens> out;
  for (int r = 0; r < n; ++r) {
    Tokens t;
    while (static_cast<int>(t.size()) < len) {
      if (!out.empty() && rng() % 2 == 0) {
        const Tokens& src = out[rng() % out.size()];
        const std::size_t span = 5 + rng() % 36;
        const std::size_t at = rng() % src.size();
        for (std::size_t i = at; i < std::min(src.size(), at + span); ++i) t.push_back(src[i]);
      } else {
        for (int i = 0; i < 8; ++i) {
          const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
          t.push_back(static_cast<std::int32_t>(std::pow(32000.0, u)) - 1);
        }
      }
    }
    t.resize(static_cast<std::size_t>(len));
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int responses = 400, len = 1000, concurrent = 16, cap = 100, depth = 24;
  bool sequential = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](int* v) {
      if (i + 1 >= argc) return false;
      *v = std::atoi(argv[++i]);
      return true;
    };
    bool ok = true;
    if (arg == "--responses") ok = value(&responses);
    else if (arg == "--len") ok = value(&len);
    else if (arg == "--concurrent") ok = value(&concurrent);
    else if (arg == "--cap") ok = value(&cap);
    else if (arg == "--depth") ok = value(&depth);
    else if (arg == "--sequential") sequential = true;
    else ok = false;
    if (!ok || responses < 1 || len < 1 || concurrent < 1 || cap < 1 || depth < 1) {
      std::fprintf(stderr,
                   "usage: suffix_tree_bench [--responses N] [--len L] [--concurrent B] [--cap C] "
                   "[--depth D] [--sequential]\n");
      return 2;
    }
  }
  if (sequential) concurrent = 1;
  const std::vector<Tokens> data = make_responses(responses, len, 7);

  // Local tree: one sequence (prompt + output), one token per extend.
  double local_s = 0.0;
  {
    baton::SuffixTree local(depth);
    const baton::SuffixSeqId s = local.add_sequence();
    const auto t0 = Clock::now();
    for (int r = 0; r < std::min(responses, 16); ++r) {
      for (const std::int32_t tok : data[static_cast<std::size_t>(r)]) local.extend(s, std::span(&tok, 1));
    }
    local_s = seconds_since(t0);
  }
  const double local_tokens = static_cast<double>(std::min(responses, 16)) * len;

  // Global tree: `concurrent` responses grow one token per step in round robin; a response is
  // removed (oldest first) when `cap` are held and a new one starts.
  baton::SuffixTree global(depth);
  std::deque<baton::SuffixSeqId> fifo;
  struct Running {
    baton::SuffixSeqId seq;
    std::size_t r, pos;
  };
  std::vector<Running> running;
  std::size_t next = 0;
  double extend_s = 0.0, remove_s = 0.0, spec_s = 0.0;
  std::int64_t removed_tokens = 0, spec_calls = 0, spec_tokens = 0, max_nodes = 0;
  while (next < data.size() || !running.empty()) {
    while (static_cast<int>(running.size()) < concurrent && next < data.size()) {
      if (static_cast<int>(fifo.size()) >= cap) {
        removed_tokens += static_cast<std::int64_t>(global.sequence(fifo.front()).size());
        const auto t0 = Clock::now();
        global.remove_sequence(fifo.front());
        remove_s += seconds_since(t0);
        fifo.pop_front();
      }
      running.push_back({global.add_sequence(), next++, 0});
      fifo.push_back(running.back().seq);
    }
    for (std::size_t i = 0; i < running.size();) {
      Running& run = running[i];
      const Tokens& t = data[run.r];
      auto t0 = Clock::now();
      global.extend(run.seq, std::span(&t[run.pos], 1));
      extend_s += seconds_since(t0);
      ++run.pos;
      const std::span<const std::int32_t> ctx(t.data(), run.pos);
      t0 = Clock::now();
      spec_tokens += static_cast<std::int64_t>(global.speculate(ctx, 8, 1.0f, 0.1f).tokens.size());
      spec_s += seconds_since(t0);
      ++spec_calls;
      if (run.pos == t.size()) {
        running[i] = running.back();
        running.pop_back();
      } else {
        ++i;
      }
    }
    max_nodes = std::max<std::int64_t>(max_nodes, global.num_nodes());
  }
  const double total_tokens = static_cast<double>(responses) * len;
  std::printf(
      "{\"bench\": \"suffix_tree\", \"depth\": %d, \"responses\": %d, \"len\": %d, \"concurrent\": %d, "
      "\"cap\": %d, \"local_extend_ns_per_token\": %.1f, \"global_extend_ns_per_token\": %.1f, "
      "\"remove_ns_per_token\": %.1f, \"speculate_us_per_call\": %.2f, \"mean_spec_tokens\": %.3f, "
      "\"max_global_nodes\": %lld, \"max_global_nodes_per_held_token\": %.3f}\n",
      depth, responses, len, concurrent, cap, 1e9 * local_s / local_tokens, 1e9 * extend_s / total_tokens,
      removed_tokens > 0 ? 1e9 * remove_s / static_cast<double>(removed_tokens) : 0.0,
      1e6 * spec_s / static_cast<double>(spec_calls),
      static_cast<double>(spec_tokens) / static_cast<double>(spec_calls), static_cast<long long>(max_nodes),
      static_cast<double>(max_nodes) / (static_cast<double>(cap) * len));
  return 0;
}
