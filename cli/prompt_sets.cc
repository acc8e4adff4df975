#include "cli/prompt_sets.h"

#include <zlib.h>

#include <memory>

#include "common/status.h"
#include "nlohmann/json.hpp"

namespace baton::cli {
namespace {

// The whole file, gunzipped (zlib reads plain files through the same calls).
absl::StatusOr<std::string> read_maybe_gzip(const std::string& path) {
  std::unique_ptr<gzFile_s, int (*)(gzFile)> f(gzopen(path.c_str(), "rb"), gzclose);
  if (!f) return absl::NotFoundError(str_cat("cannot open prompt file ", path));
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const int n = gzread(f.get(), buf, sizeof buf);
    if (n < 0) return absl::DataLossError(str_cat("cannot read ", path, ": ", gzerror(f.get(), nullptr)));
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> read_lines(const std::string& path) {
  BATON_ASSIGN_OR_RETURN(std::string text, read_maybe_gzip(path));
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

absl::StatusOr<std::vector<std::string>> load_prompt_file(const std::string& path) {
  BATON_ASSIGN_OR_RETURN(std::vector<std::string> lines, read_lines(path));
  std::vector<std::string> prompts;
  for (int line_no = 1; line_no <= static_cast<int>(lines.size()); ++line_no) {
    const std::string& line = lines[static_cast<std::size_t>(line_no - 1)];
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const auto where = [&] { return str_cat(path, ":", line_no); };
    if (!j.is_object()) return absl::InvalidArgumentError(str_cat(where(), ": not a JSON object"));
    if (j.contains("prompt") && j["prompt"].is_string()) {
      prompts.push_back(j["prompt"].get<std::string>());
    } else if (j.contains("text") && j["text"].is_string()) {
      prompts.push_back(j["text"].get<std::string>());
    } else if (j.contains("turns") && j["turns"].is_array() && !j["turns"].empty() && j["turns"][0].is_string()) {
      prompts.push_back(j["turns"][0].get<std::string>());
    } else {
      return absl::InvalidArgumentError(
          str_cat(where(), ": no prompt (want a string field \"prompt\" or \"text\", or \"turns\": [string, ...])"));
    }
  }
  return prompts;
}

absl::StatusOr<std::vector<std::string>> default_prompt_set(const std::string& data_dir, int n) {
  BATON_ASSIGN_OR_RETURN(std::vector<std::string> code, load_prompt_file(data_dir + "/HumanEval.jsonl.gz"));
  BATON_ASSIGN_OR_RETURN(std::vector<std::string> mixed, load_prompt_file(data_dir + "/spec_bench_question.jsonl"));
  std::vector<std::string> out;
  for (std::size_t i = 0; static_cast<int>(out.size()) < n && (i < code.size() || i < mixed.size()); ++i) {
    if (i < code.size()) out.push_back(code[i]);
    if (static_cast<int>(out.size()) < n && i < mixed.size()) out.push_back(mixed[i]);
  }
  return out;
}

}  // namespace baton::cli
