// How llama_decode_bench fails: a line on stderr and {"bench": "llama_decode_bench", "error": ...}
// as its JSON on stdout (bench/gpu/summarize_checks.py reports it), then exit status 1. Shared by
// the bench and the random model it builds (random_llama.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "absl/status/status.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace baton::bench {

[[noreturn]] inline void die(const std::string& what) {
  std::fprintf(stderr, "llama_decode_bench: %s\n", what.c_str());
  std::cout << nlohmann::json{{"bench", "llama_decode_bench"}, {"error", what}}.dump() << std::endl;
  std::exit(1);
}

inline void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) die(str_cat(what, ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")"));
}

inline void check(const absl::Status& s, const char* what) {
  if (!s.ok()) die(str_cat(what, ": ", s.ToString()));
}

}  // namespace baton::bench
