// What the metrics tests share: scraping a /metrics endpoint over real HTTP, `promtool check
// metrics` (Prometheus's own linter) on what was scraped, and reading samples back from the text
// exposition format (tests read it; nothing in Baton writes it by hand).
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "httplib.h"

namespace baton::testing {

// The body of GET http://ADDRESS/metrics, or nullopt.
inline std::optional<std::string> scrape(const std::string& address) {
  httplib::Client client("http://" + address);
  client.set_connection_timeout(5);
  client.set_read_timeout(10);
  auto res = client.Get("/metrics");
  if (!res || res->status != 200) return std::nullopt;
  return res->body;
}

struct PromtoolResult {
  int exit_code = -1;
  std::string output;
};

// `promtool check metrics` with `text` on stdin.
inline PromtoolResult promtool_check(const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("promtool_in_" + std::to_string(::getpid()) + ".txt");
  std::ofstream(path) << text;
  PromtoolResult r;
  FILE* p = ::popen(("promtool check metrics < '" + path.string() + "' 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::filesystem::remove(path);
  return r;
}

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Samples of the text format (label values here never hold '"' or ',').
inline std::vector<Sample> parse_samples(const std::string& text) {
  std::vector<Sample> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line[0] == '#') continue;
    Sample s;
    std::size_t brace = line.find('{');
    std::size_t space;
    if (brace != std::string::npos && brace < line.find(' ')) {
      s.name = line.substr(0, brace);
      const std::size_t close = line.find('}', brace);
      std::string labels = line.substr(brace + 1, close - brace - 1);
      std::size_t lp = 0;
      while (lp < labels.size()) {
        const std::size_t eq = labels.find('=', lp);
        const std::size_t q2 = labels.find('"', eq + 2);
        s.labels[labels.substr(lp, eq - lp)] = labels.substr(eq + 2, q2 - eq - 2);
        lp = q2 + 1;
        if (lp < labels.size() && labels[lp] == ',') ++lp;
      }
      space = close + 1;
    } else {
      space = line.find(' ');
      s.name = line.substr(0, space);
    }
    s.value = std::stod(line.substr(space + 1));
    out.push_back(std::move(s));
  }
  return out;
}

// Whether a sample is named `name` and its labels include `match`.
inline bool matches(const Sample& s, const std::string& name, const std::map<std::string, std::string>& match) {
  if (s.name != name) return false;
  for (const auto& [k, v] : match) {
    auto it = s.labels.find(k);
    if (it == s.labels.end() || it->second != v) return false;
  }
  return true;
}

// The sum of every sample named `name` whose labels include `match`.
inline double sum_of(const std::vector<Sample>& samples, const std::string& name,
                     const std::map<std::string, std::string>& match = {}) {
  double total = 0;
  for (const Sample& s : samples) total += matches(s, name, match) ? s.value : 0.0;
  return total;
}

// How many samples named `name` have labels that include `match`.
inline std::size_t count_of(const std::vector<Sample>& samples, const std::string& name,
                            const std::map<std::string, std::string>& match = {}) {
  std::size_t n = 0;
  for (const Sample& s : samples) n += matches(s, name, match);
  return n;
}

}  // namespace baton::testing
