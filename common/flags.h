// Command-line flags for the `baton` subcommands and the node and router binaries: `--name value`,
// `--name=value` and boolean `--name`. Each command declares its flags; unknown flags and missing
// values are errors that name the flag. (Hand-written because Abseil's flags are process-global, which does not fit one
// binary with many subcommands.)
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
  absl::StatusOr<std::optional<std::int64_t>> get_int(const std::string& name) const;
  absl::StatusOr<std::optional<double>> get_double(const std::string& name) const;

 private:
  friend absl::StatusOr<ParsedFlags> parse_flags(const std::vector<FlagSpec>&, int, char**);
  std::map<std::string, std::string> values_;
};

// argv[0] is the subcommand name; parsing starts at argv[1].
absl::StatusOr<ParsedFlags> parse_flags(const std::vector<FlagSpec>& specs, int argc, char** argv);
std::string usage(const std::string& command, const std::string& synopsis, const std::vector<FlagSpec>& specs);

}  // namespace baton
