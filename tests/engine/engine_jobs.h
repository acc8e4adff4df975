// Running a set of requests through an Engine to completion, for engine-level tests.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/engine.h"

namespace baton::testing {

struct Job {
  std::string id;
  std::vector<std::int32_t> prompt;
  SamplingParams params;
};

// Adds every job up front, steps until all finish, and returns each request's tokens.
inline std::map<std::string, std::vector<std::int32_t>> run_jobs(Engine& engine, const std::vector<Job>& jobs) {
  for (const Job& j : jobs) {
    const auto s = engine.add_request(j.id, j.prompt, j.params);
    BATON_CHECK(s.ok(), s.ToString());
  }
  std::map<std::string, std::vector<std::int32_t>> out;
  while (engine.has_unfinished()) {
    auto outs = engine.step();
    BATON_CHECK(outs.ok(), outs.status().ToString());
    for (const auto& o : *outs)
      for (const auto& t : o.new_tokens) out[o.request_id].push_back(t.token);
  }
  return out;
}

}  // namespace baton::testing
