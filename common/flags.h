// Command-line flags for Baton's executables (the `baton` subcommands, baton-router, the nodes):
// `--name value`, `--name=value` and boolean `--name`. Each program declares its flags; unknown
// flags and missing values are errors that name the flag. A flag may be given more than once:
// get() returns the last value, get_all() every value in order (for repeatable flags such as
// `--decode HOST:PORT`).
//
// Hand-written because Abseil's flags are process-global, which does not fit one binary with many
// subcommands. Must not: read the environment or exit the process (callers print usage and exit).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace baton {

struct FlagSpec {
  std::string name;         // without the leading dashes
  std::string value_name;   // empty for boolean flags
  std::string help;
};

class ParsedFlags {
 public:
  bool has(const std::string& name) const { return values_.contains(name); }
  std::optional<std::string> get(const std::string& name) const;
  // Every value given for `name`, in command-line order (empty when not given).
  std::vector<std::string> get_all(const std::string& name) const;
  absl::StatusOr<std::optional<std::int64_t>> get_int(const std::string& name) const;
  absl::StatusOr<std::optional<double>> get_double(const std::string& name) const;

 private:
  friend absl::StatusOr<ParsedFlags> parse_flags(const std::vector<FlagSpec>&, int, char**);
  std::map<std::string, std::vector<std::string>> values_;
};

// argv[0] is the program (or subcommand) name; parsing starts at argv[1].
absl::StatusOr<ParsedFlags> parse_flags(const std::vector<FlagSpec>& specs, int argc, char** argv);
// program: how the user runs it, e.g. "baton generate" or "baton-router".
std::string usage(const std::string& program, const std::string& synopsis, const std::vector<FlagSpec>& specs);

}  // namespace baton
