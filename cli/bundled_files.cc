#include "cli/bundled_files.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <vector>

#include "common/status.h"

namespace baton::cli {
namespace {

namespace fs = std::filesystem;

constexpr int kMaxLevelsUp = 6;  // SRC/build/<preset>/cli/baton is four

// Candidate roots: $BATON_HOME, then every directory above the running binary.
std::vector<fs::path> roots() {
  std::vector<fs::path> out;
  if (const char* home = std::getenv("BATON_HOME"); home != nullptr && *home != '\0') out.emplace_back(home);
  std::error_code ec;
  fs::path dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  for (int i = 0; !ec && !dir.empty() && i < kMaxLevelsUp; ++i) {
    out.push_back(dir);
    if (dir == dir.root_path()) break;
    dir = dir.parent_path();
  }
  return out;
}

// The first root/relative (over roots() x `relatives`) that is a directory holding `marker`.
absl::StatusOr<std::string> find(const std::vector<std::string>& relatives, const std::string& marker,
                                 const std::string& what, const std::string& flag) {
  std::string looked;
  for (const fs::path& root : roots()) {
    for (const std::string& rel : relatives) {
      const fs::path dir = root / rel;
      std::error_code ec;
      if (fs::is_regular_file(dir / marker, ec) || fs::is_directory(dir / marker, ec)) return dir.string();
      if (looked.size() < 2000) looked += str_cat(looked.empty() ? "" : ", ", dir.string());
    }
  }
  return absl::NotFoundError(str_cat("cannot find ", what, " (looked in ", looked.empty() ? "nothing" : looked,
                                     "); set BATON_HOME to the directory that holds it, or pass ", flag));
}

}  // namespace

absl::StatusOr<std::string> bundled_model_family() {
  return find({"models/baton-tiny-code"}, "target/config.json", "the bundled model family models/baton-tiny-code",
              "--model");
}

absl::StatusOr<std::string> bundled_prompt_data() {
  return find({"share/baton/bench-data", "bench/data"}, "HumanEval.jsonl.gz", "the bundled prompt sets (bench/data)",
              "--dataset-path / --prompts-file");
}

}  // namespace baton::cli
