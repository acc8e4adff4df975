// What stop strings cost the engine thread: one request's StopChecker with many long stop strings
// (default 1,000 of 1 KiB, as a client may send), fed an output of random tokens one at a time as
// the engine does. Prints one JSON line: the checker's nanoseconds per output byte against a
// linear scan's floor (reading each output byte once, measured in the same run), their ratio, and
// the one-off cost of building the request's automaton.
//
//   build/release/bench/stop_strings_bench [--stops 1000] [--stop-bytes 1024] [--tokens 4096] [--rounds 5]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "engine/sample/stop_checker.h"
#include "nlohmann/json.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// A TextDecoder whose token t is the piece pieces[t].
class PieceDecoder final : public baton::TextDecoder {
 public:
  explicit PieceDecoder(const std::vector<std::string>& pieces) : pieces_(pieces) {}
  void append(std::span<const std::int32_t> tokens) override {
    for (std::int32_t t : tokens) text_ += pieces_[static_cast<std::size_t>(t)];
  }
  void finish() override {}
  const std::string& text() const override { return text_; }

 private:
  const std::vector<std::string>& pieces_;
  std::string text_;
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

long flag(int argc, char** argv, const char* name, long fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == name) return std::stol(argv[i + 1]);
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const long num_stops = flag(argc, argv, "--stops", 1000);
  const long stop_bytes = flag(argc, argv, "--stop-bytes", 1024);
  const long num_tokens = flag(argc, argv, "--tokens", 4096);
  const long rounds = flag(argc, argv, "--rounds", 5);
  std::mt19937 rng(1);
  // Text over a small alphabet, so that stop-string prefixes occur (and are held back) often, as
  // with code; stop strings from the same alphabet that never occur whole.
  const std::string alphabet = "ab (){}:\n";
  std::vector<std::string> pieces(64);
  for (std::string& p : pieces) {
    for (int i = 0, n = 1 + static_cast<int>(rng() % 6); i < n; ++i) p += alphabet[rng() % alphabet.size()];
  }
  baton::SamplingParams params;
  params.max_tokens = static_cast<std::int32_t>(num_tokens);
  for (long i = 0; i < num_stops; ++i) {
    std::string s(static_cast<std::size_t>(stop_bytes), 'a');
    for (char& c : s) c = alphabet[rng() % alphabet.size()];
    s.back() = '#';  // never in the text: no stop string ever matches whole
    params.stop.push_back(std::move(s));
  }
  std::vector<std::int32_t> output;
  for (long i = 0; i < num_tokens; ++i) output.push_back(static_cast<std::int32_t>(rng() % pieces.size()));

  std::vector<double> checker_ns_per_byte, floor_ns_per_byte, build_ms;
  std::size_t text_bytes = 0, held_back_max = 0;
  for (long r = 0; r < rounds; ++r) {
    PieceDecoder decoder(pieces);
    const auto built = Clock::now();
    baton::StopChecker checker(params, {}, &decoder);
    build_ms.push_back(seconds_since(built) * 1e3);
    const auto start = Clock::now();
    baton::StopDecision d;
    for (long i = 1; i <= num_tokens && d.reason == baton::FinishReason::kNone; ++i) {
      d = checker.check(std::span<const std::int32_t>(output).first(static_cast<std::size_t>(i)));
      held_back_max = std::max(held_back_max, checker.text().size() - d.visible_len);
    }
    const double checker_s = seconds_since(start);
    text_bytes = checker.text().size();
    // The floor: the same bytes decoded, then each read once (a sum the compiler cannot drop).
    PieceDecoder again(pieces);
    const auto scan = Clock::now();
    unsigned long sum = 0;
    for (long i = 0; i < num_tokens; ++i) {
      const std::size_t before = again.text().size();
      again.append(std::span<const std::int32_t>(output).subspan(static_cast<std::size_t>(i), 1));
      for (std::size_t b = before; b < again.text().size(); ++b) sum += static_cast<unsigned char>(again.text()[b]);
    }
    const double floor_s = seconds_since(scan);
    if (sum == 42) std::printf("#");
    checker_ns_per_byte.push_back(checker_s * 1e9 / static_cast<double>(text_bytes));
    floor_ns_per_byte.push_back(floor_s * 1e9 / static_cast<double>(text_bytes));
  }
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  nlohmann::json out = {{"bench", "stop_strings"},
                        {"stop_strings", num_stops},
                        {"stop_string_bytes", stop_bytes},
                        {"output_tokens", num_tokens},
                        {"output_bytes", text_bytes},
                        {"max_held_back_bytes", held_back_max},
                        {"checker_ns_per_output_byte_median", median(checker_ns_per_byte)},
                        {"linear_scan_ns_per_output_byte_median", median(floor_ns_per_byte)},
                        {"ratio_checker_over_linear_scan", median(checker_ns_per_byte) / median(floor_ns_per_byte)},
                        {"automaton_build_ms_median", median(build_ms)}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
