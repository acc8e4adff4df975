#include "router/topology.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "nlohmann/json.hpp"

namespace baton::router {
namespace {

constexpr std::string_view kHidden = "[address hidden]";

bool digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

// Length of a dotted quad (optionally ":port") at text[i], or 0.
std::size_t ipv4_at(std::string_view text, std::size_t i) {
  if (i > 0 && (digit(text[i - 1]) || text[i - 1] == '.')) return 0;
  std::size_t j = i;
  for (int part = 0; part < 4; ++part) {
    const std::size_t start = j;
    while (j < text.size() && digit(text[j]) && j - start < 3) ++j;
    if (j == start) return 0;
    if (part < 3) {
      if (j >= text.size() || text[j] != '.') return 0;
      ++j;
    }
  }
  if (j < text.size() && (digit(text[j]) || text[j] == '.')) return 0;
  if (j + 1 < text.size() && text[j] == ':' && digit(text[j + 1])) {
    ++j;
    while (j < text.size() && digit(text[j])) ++j;
  }
  return j - i;
}

// Length of "[hex:...]" (optionally ":port") at text[i], or 0.
std::size_t ipv6_at(std::string_view text, std::size_t i) {
  if (text[i] != '[') return 0;
  std::size_t j = i + 1;
  bool colon = false;
  while (j < text.size() && (std::isxdigit(static_cast<unsigned char>(text[j])) || text[j] == ':' || text[j] == '.')) {
    colon |= text[j] == ':';
    ++j;
  }
  if (j >= text.size() || text[j] != ']' || !colon) return 0;
  ++j;
  if (j + 1 < text.size() && text[j] == ':' && digit(text[j + 1])) {
    ++j;
    while (j < text.size() && digit(text[j])) ++j;
  }
  return j - i;
}

}  // namespace

std::string redact_addresses(std::string_view text, const std::vector<std::string>& known) {
  std::string pass(text);
  // Known addresses first (longest first, so that one is not cut by a shorter one it contains).
  std::vector<std::string> names(known.begin(), known.end());
  std::sort(names.begin(), names.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
  for (const std::string& name : names) {
    if (name.empty()) continue;
    for (std::size_t at = pass.find(name); at != std::string::npos; at = pass.find(name, at + kHidden.size())) {
      pass.replace(at, name.size(), kHidden);
    }
  }
  std::string out;
  out.reserve(pass.size());
  for (std::size_t i = 0; i < pass.size();) {
    std::size_t n = digit(pass[i]) ? ipv4_at(pass, i) : ipv6_at(pass, i);
    if (n > 0) {
      out += kHidden;
      i += n;
    } else {
      out += pass[i++];
    }
  }
  return out;
}

std::string redact_speculative_config(const std::string& json) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return json;
  if (j.contains("model") && j["model"].is_string()) {
    std::filesystem::path p(j["model"].get<std::string>());
    if (!p.has_filename()) p = p.parent_path();
    j["model"] = p.filename().string();
  }
  j.erase("proposer_endpoint");
  return j.dump();
}

}  // namespace baton::router
