#include "common/flags.h"

#include <cerrno>
#include <cstdlib>

#include "common/status.h"

namespace baton {

std::optional<std::string> ParsedFlags::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second.back();
}

std::vector<std::string> ParsedFlags::get_all(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return {};
  return it->second;
}

absl::StatusOr<std::optional<std::int64_t>> ParsedFlags::get_int(const std::string& name) const {
  auto v = get(name);
  if (!v) return std::optional<std::int64_t>();
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v->c_str(), &end, 10);
  if (v->empty() || *end != '\0' || errno != 0) {
    return absl::InvalidArgumentError(str_cat("--", name, " expects an integer, got '", *v, "'"));
  }
  return std::optional<std::int64_t>(x);
}

absl::StatusOr<std::optional<double>> ParsedFlags::get_double(const std::string& name) const {
  auto v = get(name);
  if (!v) return std::optional<double>();
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(v->c_str(), &end);
  if (v->empty() || *end != '\0' || errno != 0) {
    return absl::InvalidArgumentError(str_cat("--", name, " expects a number, got '", *v, "'"));
  }
  return std::optional<double>(x);
}

absl::StatusOr<ParsedFlags> parse_flags(const std::vector<FlagSpec>& specs, int argc, char** argv) {
  ParsedFlags out;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) return absl::InvalidArgumentError(str_cat("unexpected argument '", arg, "'"));
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (const auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const FlagSpec* spec = nullptr;
    for (const auto& s : specs) {
      if (s.name == name) spec = &s;
    }
    if (spec == nullptr) return absl::InvalidArgumentError(str_cat("unknown flag --", name));
    if (spec->value_name.empty()) {
      if (value) return absl::InvalidArgumentError(str_cat("--", name, " takes no value"));
      value = "true";
    } else if (!value) {
      if (i + 1 >= argc) return absl::InvalidArgumentError(str_cat("--", name, " needs a value (", spec->value_name, ")"));
      value = argv[++i];
    }
    out.values_[name].push_back(*value);
  }
  return out;
}

std::string usage(const std::string& program, const std::string& synopsis, const std::vector<FlagSpec>& specs) {
  std::string s = str_cat("usage: ", program, " ", synopsis, "\n\nflags:\n");
  for (const auto& f : specs) {
    std::string left = str_cat("  --", f.name, f.value_name.empty() ? "" : " " + f.value_name);
    if (left.size() < 28) left.resize(28, ' ');
    s += str_cat(left, " ", f.help, "\n");
  }
  return s;
}

}  // namespace baton
