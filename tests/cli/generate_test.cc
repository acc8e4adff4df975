// `baton generate` as a real process on every fixture architecture: the greedy continuation equals
// the reference implementation's, --json carries the documented fields, and bad input fails with
// a clear message and a non-zero exit code (as does `baton up` on a busy port).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/fixtures.h"

namespace baton {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct ProcessResult {
  int exit_code = -1;
  std::string out, err;
};

std::string escape_for_double_quotes(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\' || c == '$' || c == '`') out += '\\';
    out += c;
  }
  return out;
}

ProcessResult run_baton(const std::string& args) {
  const std::string err_path = std::filesystem::temp_directory_path() / ("baton_cli_err_" + std::to_string(::getpid()));
  // bash, for the <<< here-strings some tests feed to `baton tokenize`.
  const std::string cmd = "bash -c \"" + std::string(BATON_CLI_PATH) + " " + escape_for_double_quotes(args) + "\" 2>" + err_path;
  ProcessResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  BATON_CHECK(p != nullptr, "popen failed");
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_path);
  r.err.assign(std::istreambuf_iterator<char>(e), {});
  std::filesystem::remove(err_path);
  return r;
}

std::string ids_arg(const std::vector<std::int32_t>& ids) {
  std::string s;
  for (std::size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

class GenerateCli : public ::testing::TestWithParam<std::string> {};

TEST_P(GenerateCli, ReproducesTheReferenceGreedyContinuation) {
  const auto ref = testing::load_reference(GetParam());
  const ProcessResult r = run_baton("generate --model " + testing::fixture_path(GetParam()) + " --prompt-tokens " +
                          ids_arg(ref.prompt) + " --max-tokens " + std::to_string(ref.max_new_tokens) +
                          " --output token-ids --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["token_ids"].get<std::vector<std::int32_t>>(), ref.greedy);
  EXPECT_EQ(j["prompt_tokens"].get<std::size_t>(), ref.prompt.size());
  EXPECT_EQ(j["generated_tokens"].get<std::size_t>(), ref.greedy.size());
  EXPECT_GT(j["prefill_tokens_per_s"].get<double>(), 0.0);
  EXPECT_GT(j["decode_tokens_per_s"].get<double>(), 0.0);
  EXPECT_THAT(r.err, HasSubstr("decode"));
}

INSTANTIATE_TEST_SUITE_P(AllArchitectures, GenerateCli, ::testing::ValuesIn(testing::fixture_names()),
                         [](const auto& p) { return testing::test_name_for(p.param); });

TEST(GenerateCliErrors, BadInputFailsClearly) {
  const std::string model = testing::fixture_path("llama-f32");
  ProcessResult r = run_baton("generate --model /nonexistent --prompt-tokens 1,2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("/nonexistent"));
  r = run_baton("generate --model " + model + " --prompt-tokens 1,99999");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("outside the vocabulary"));
  r = run_baton("generate --model " + model + " --prompt-tokens 1,x");
  EXPECT_THAT(r.err, HasSubstr("'x' is not a token id"));
  r = run_baton("generate --model " + model + " --prompt-tokens 1 --temperature hot");
  EXPECT_THAT(r.err, HasSubstr("--temperature expects a number"));
  r = run_baton("generate --model " + model + " --prompt-tokens 1 --bogus");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown flag --bogus"));
  r = run_baton("generate --model " + model);
  EXPECT_EQ(r.exit_code, 2);
  r = run_baton("frobnicate");
  EXPECT_EQ(r.exit_code, 2);
}

// A router that nothing answers for is an error at once (not after the call's 10 s deadline), and
// the process then exits without waiting on gRPC.
TEST(GenerateCliErrors, AnUnreachableRouterFailsAtOnce) {
  int port = 0;
  {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port = ntohs(a.sin_port);
    ::close(fd);  // bound, never listening, now closed: connections are refused
  }
  const auto t0 = std::chrono::steady_clock::now();
  const ProcessResult r = run_baton("generate --endpoint 127.0.0.1:" + std::to_string(port) + " --prompt x");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(8)) << "it waited for the call's deadline";
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("cannot reach the router"));
  EXPECT_THAT(r.err, HasSubstr("Connection refused"));
  EXPECT_THAT(r.err, Not(HasSubstr("--tls-ca")));
  EXPECT_THAT(r.err, Not(HasSubstr("still running")));
}

// `baton up` on a router port that is taken: refused before any node starts, saying what to do.
TEST(UpCliErrors, ABusyRouterPortIsRefusedBeforeAnyNodeStarts) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string port = std::to_string(ntohs(a.sin_port));
  for (const std::string& flag : {std::string("--port"), std::string("--http-port")}) {
    SCOPED_TRACE(flag);
    const std::string other = flag == "--port" ? " --http-port 0" : " --port 0";
    const ProcessResult r = run_baton("up " + flag + " " + port + other + " --kv-cache-memory 0.125");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr(flag + " " + port + ": 127.0.0.1:" + port + " is in use"));
    EXPECT_THAT(r.err, Not(HasSubstr("starting"))) << "nodes were started first";
  }
  ::close(fd);
}

// Engine flags configure a local engine: with --endpoint they would be ignored, so they are refused.
TEST(GenerateCliErrors, EngineFlagsWithAnEndpointAreRefused) {
  for (const std::string& flag : {std::string("--model ") + testing::fixture_path("llama-f32"), std::string("--threads 2"),
                                  std::string("--speculative-config '{\"method\":\"ngram\"}'")}) {
    SCOPED_TRACE(flag);
    const ProcessResult r = run_baton("generate --endpoint 127.0.0.1:1 --prompt x " + flag);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr(flag.substr(0, flag.find(' '))));
    EXPECT_THAT(r.err, HasSubstr("--endpoint"));
  }
}

// A missing model directory is the error whatever the prompt flag, not the tokenizer files it
// lacks; so is a path that is not a directory.
TEST(GenerateCliErrors, MissingModelDirectoryIsTheErrorWhateverThePrompt) {
  for (const std::string prompt : {"--prompt hi", "--chat '[{\"role\":\"user\",\"content\":\"hi\"}]'",
                                   "--prompt-tokens 1,2"}) {
    const ProcessResult r = run_baton("generate --model /no/such/dir " + prompt);
    EXPECT_EQ(r.exit_code, 1) << prompt;
    EXPECT_THAT(r.err, HasSubstr("/no/such/dir: no such directory")) << prompt;
    EXPECT_THAT(r.err, Not(HasSubstr("tokenizer"))) << prompt;
  }
  const std::string file = testing::fixture_path("llama3-bf16") + "/config.json";
  const ProcessResult r = run_baton("generate --model " + file + " --prompt hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr(file + ": not a directory"));
}

TEST(GenerateCliText, TextPromptEqualsItsTokenIdsAndTextEqualsTheirDecoding) {
  // The llama3-style fixture tokenizer adds BOS (id 1) through its post-processor.
  const std::string model = testing::fixture_path("llama3-bf16");
  const std::string prompt = "def fibonacci(n):";
  const ProcessResult by_text = run_baton("generate --model " + model + " --prompt '" + prompt +
                                          "' --max-tokens 12 --ignore-eos --json");
  ASSERT_EQ(by_text.exit_code, 0) << by_text.err;
  const auto j = nlohmann::json::parse(by_text.out);
  const ProcessResult ids = run_baton("tokenize --model " + model + " <<< '" + prompt + "'");
  ASSERT_EQ(ids.exit_code, 0) << ids.err;
  auto prompt_ids = nlohmann::json::parse(ids.out).get<std::vector<std::int32_t>>();
  prompt_ids.insert(prompt_ids.begin(), 1);
  EXPECT_EQ(j["prompt_tokens"].get<std::size_t>(), prompt_ids.size());
  const ProcessResult by_ids = run_baton("generate --model " + model + " --prompt-tokens " + ids_arg(prompt_ids) +
                                         " --max-tokens 12 --ignore-eos --output token-ids --json");
  ASSERT_EQ(by_ids.exit_code, 0) << by_ids.err;
  EXPECT_EQ(j["token_ids"], nlohmann::json::parse(by_ids.out)["token_ids"]);
  const ProcessResult decoded = run_baton("tokenize --model " + model + " --decode --skip-special-tokens <<< '" +
                                          j["token_ids"].dump() + "'");
  ASSERT_EQ(decoded.exit_code, 0) << decoded.err;
  EXPECT_EQ(nlohmann::json::parse(decoded.out).get<std::string>(), j["text"].get<std::string>());
}

TEST(GenerateCliText, ChatPromptUsesTheTemplate) {
  const std::string model = testing::fixture_path("qwen3-bf16");
  const ProcessResult r = run_baton("generate --model " + model +
                                    " --chat '[{\"role\":\"user\",\"content\":\"hi\"}]' --max-tokens 4 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // ChatML wraps even a two-letter message in a dozen or more tokens.
  EXPECT_GT(nlohmann::json::parse(r.out)["prompt_tokens"].get<int>(), 8);
  const ProcessResult bad = run_baton("generate --model " + model + " --chat '{\"role\":1}'");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.err, HasSubstr("--chat must be a JSON array"));
}

// --chat-template replaces the bundled model's chat template, as the template itself or as a file:
// the chat's tokens are then those of the rendered text given as a prompt. Refused
// with --endpoint (the router renders there), and a template that does not compile or a file that
// is not there is an error naming the flag.
TEST(GenerateCliText, AChatTemplateFlagRendersChatsWithIt) {
  const std::string model = std::string(BATON_SOURCE_DIR) + "/models/baton-tiny-code/target";
  const std::string source = "{% for m in messages %}{{ m.role }}: {{ m.content }} {% endfor %}assistant:";
  const std::string chat = " --chat '[{\"role\":\"user\",\"content\":\"def fib(n):\"}]' --max-tokens 8 --output token-ids --json";
  // A rendered chat is encoded without BOS (as transformers' apply_chat_template), as `baton
  // tokenize` encodes a line.
  const ProcessResult ids = run_baton("tokenize --model " + model + " <<< 'user: def fib(n): assistant:'");
  ASSERT_EQ(ids.exit_code, 0) << ids.err;
  std::string id_list = nlohmann::json::parse(ids.out).dump();
  id_list = id_list.substr(1, id_list.size() - 2);
  const ProcessResult plain = run_baton("generate --model " + model + " --prompt-tokens " + id_list +
                                        " --max-tokens 8 --output token-ids --json");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const nlohmann::json expected = nlohmann::json::parse(plain.out);
  // Without the flag the model's own template renders the chat, into other tokens.
  const ProcessResult without = run_baton("generate --model " + model + chat);
  ASSERT_EQ(without.exit_code, 0) << without.err;
  EXPECT_NE(nlohmann::json::parse(without.out)["prompt_tokens"], expected["prompt_tokens"]);
  const std::string file =
      std::filesystem::temp_directory_path() / ("baton_chat_template_" + std::to_string(::getpid()) + ".jinja");
  std::ofstream(file) << source;
  for (const std::string& arg : {"'" + source + "'", file}) {
    const ProcessResult r = run_baton("generate --model " + model + " --chat-template " + arg + chat);
    ASSERT_EQ(r.exit_code, 0) << arg << ": " << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["prompt_tokens"], expected["prompt_tokens"]) << arg;
    EXPECT_EQ(j["token_ids"], expected["token_ids"]) << arg;
  }
  std::filesystem::remove(file);
  const ProcessResult broken = run_baton("generate --model " + model + " --chat-template '{% if %}'" + chat);
  EXPECT_EQ(broken.exit_code, 1);
  EXPECT_THAT(broken.err, HasSubstr("--chat-template"));
  const ProcessResult missing = run_baton("generate --model " + model + " --chat-template no-such.jinja" + chat);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("--chat-template no-such.jinja: no such file"));
  const ProcessResult remote = run_baton("generate --endpoint 127.0.0.1:1 --chat-template x --prompt x");
  EXPECT_EQ(remote.exit_code, 2);
  EXPECT_THAT(remote.err, HasSubstr("router"));
}

// Stop strings and streamed text go through the engine's TextDecoder and StopChecker: the text
// with --stop is the text without it, cut before the first occurrence of the stop string, and what
// streams to stdout is exactly the text --json reports.
TEST(GenerateCliText, StopStringCutsTheStreamedText) {
  const std::string model = std::string(BATON_SOURCE_DIR) + "/models/baton-tiny-code/target";
  const std::string base = "generate --model " + model + " --prompt 'def fibonacci(n):' --max-tokens 48 --ignore-eos";
  const ProcessResult full = run_baton(base + " --json");
  ASSERT_EQ(full.exit_code, 0) << full.err;
  const std::string text = nlohmann::json::parse(full.out)["text"].get<std::string>();
  // A stop string from the second half of the text, of characters the shell leaves alone.
  std::string stop;
  for (std::size_t at = text.size() / 2; at + 3 <= text.size() && stop.empty(); ++at) {
    const std::string candidate = text.substr(at, 3);
    if (std::all_of(candidate.begin(), candidate.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)); })) {
      stop = candidate;
    }
  }
  ASSERT_FALSE(stop.empty()) << "no alphanumeric stop string in: " << text;
  const std::string expected = text.substr(0, text.find(stop));

  const ProcessResult stopped = run_baton(base + " --stop '" + stop + "' --json");
  ASSERT_EQ(stopped.exit_code, 0) << stopped.err;
  const auto j = nlohmann::json::parse(stopped.out);
  EXPECT_EQ(j["text"].get<std::string>(), expected) << "stop '" << stop << "' in: " << text;
  EXPECT_EQ(j["finish_reason"], "stop");
  const ProcessResult streamed = run_baton(base + " --stop '" + stop + "'");
  ASSERT_EQ(streamed.exit_code, 0) << streamed.err;
  EXPECT_EQ(streamed.out, expected + "\n");
}

TEST(GenerateCliSpec, EveryMethodGivesThePlainGreedyTokensAndReportsCounters) {
  const std::string model = testing::fixture_path("llama-f32");
  const std::string spec = testing::fixture_path("spec/");
  const std::string base = "generate --model " + model + " --prompt-tokens 5,6,7,5,6,7,5,6 --max-tokens 24 --ignore-eos --json";
  const ProcessResult plain = run_baton(base);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const auto expected = nlohmann::json::parse(plain.out)["token_ids"];
  const std::vector<std::string> configs = {
      R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":1,"prompt_lookup_max":3})",
      R"({"method":"suffix","num_speculative_tokens":3})",
      R"({"method":"draft_model","num_speculative_tokens":3,"model":")" + spec + R"(draft-llama-f32"})",
      R"({"method":"eagle","num_speculative_tokens":3,"model":")" + spec + R"(eagle-llama-f32"})",
      R"({"method":"eagle3","num_speculative_tokens":3,"model":")" + spec + R"(eagle3-llama-f32"})",
      R"({"method":"mtp","num_speculative_tokens":3,"model":")" + spec + R"(mtp-deepseek-llama-f32","rejection_sample_method":"block"})",
      R"({"method":"eagle3","num_speculative_tokens":3,"adaptive_draft_length":true,"model":")" + spec + R"(eagle3-llama-f32"})",
  };
  for (const std::string& c : configs) {
    const ProcessResult r = run_baton(base + " --speculative-config '" + c + "'");
    ASSERT_EQ(r.exit_code, 0) << c << "\n" << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["token_ids"], expected) << c;
    ASSERT_TRUE(j.contains("spec")) << c;
    for (const char* key : {"method", "num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_position",
                            "acceptance_rate", "mean_acceptance_length", "adaptive_draft_length", "proposals_by_length"}) {
      EXPECT_TRUE(j["spec"].contains(key)) << c << " lacks " << key;
    }
    const bool adaptive = c.find("adaptive_draft_length") != std::string::npos;
    EXPECT_EQ(j["spec"]["adaptive_draft_length"].get<bool>(), adaptive) << c;
    const auto by_length = j["spec"]["proposals_by_length"].get<std::vector<int>>();
    ASSERT_EQ(by_length.size(), 4u) << c;  // lengths 0..3
    if (adaptive) {
      EXPECT_GT(by_length[0], 0) << c << ": the adaptive length never tried drafting nothing";
    } else {
      EXPECT_EQ(by_length[0], 0) << c;
    }
    EXPECT_GT(j["spec"]["num_draft_tokens"].get<int>(), 0) << c;
    EXPECT_THAT(r.err, HasSubstr("mean acceptance length"));
    // Rates read as percentages in every command's text, as `bench serve` prints them.
    EXPECT_THAT(r.err, ::testing::ContainsRegex("accepted \\(acceptance rate [0-9]+\\.[0-9][0-9] %\\)"));
  }
  const ProcessResult bad = run_baton(base + " --speculative-config '{\"method\":\"eagle3\",\"num_speculative_tokens\":3}'");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.err, HasSubstr("`model` is required"));
}

// With nothing drafted (one token: no decode step), rates are unknown, not 0: null in the JSON,
// and the summary line says there were no drafts instead of "mean acceptance length 0.000".
TEST(GenerateCliSpec, NoDraftsReportsNoRatesRatherThanZero) {
  const std::string base = "generate --model " + testing::fixture_path("llama-f32") +
                           " --prompt-tokens 5,6,7,5,6,7 --max-tokens 1 --speculative-config "
                           "'{\"method\":\"ngram\",\"num_speculative_tokens\":3}'";
  const ProcessResult json_run = run_baton(base + " --json");
  ASSERT_EQ(json_run.exit_code, 0) << json_run.err;
  const auto j = nlohmann::json::parse(json_run.out);
  EXPECT_EQ(j["spec"]["num_drafts"].get<int>(), 0);
  EXPECT_TRUE(j["spec"]["acceptance_rate"].is_null()) << j["spec"].dump();
  EXPECT_TRUE(j["spec"]["mean_acceptance_length"].is_null()) << j["spec"].dump();
  const ProcessResult text_run = run_baton(base);
  ASSERT_EQ(text_run.exit_code, 0) << text_run.err;
  EXPECT_THAT(text_run.err, HasSubstr("speculative ngram: no drafts"));
  EXPECT_THAT(text_run.err, Not(HasSubstr("mean acceptance length 0.000")));
}

TEST(GenerateCliErrors, SamplingWithSeedIsReproducible) {
  const std::string base = "generate --model " + testing::fixture_path("qwen2-f32") +
                           " --prompt-tokens 5,6,7,8 --max-tokens 12 --temperature 1.0 --top-p 0.95 --ignore-eos --json";
  const ProcessResult a = run_baton(base + " --seed 7"), b = run_baton(base + " --seed 7");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(nlohmann::json::parse(a.out)["token_ids"], nlohmann::json::parse(b.out)["token_ids"]);
}

// --prompts-file: an offline batch through one engine.
TEST(GenerateCliBatch, PromptsFileRunsEveryPromptAndSummarizes) {
  const std::string model = testing::fixture_path("llama3-bf16");
  const std::string path = std::filesystem::temp_directory_path() / ("baton_prompts_" + std::to_string(::getpid()) + ".jsonl");
  {
    std::ofstream f(path);
    f << R"({"prompt_tokens": [1, 20, 21, 22], "max_tokens": 6})" << "\n";
    f << "\n";  // blank lines are skipped
    f << R"({"prompt": "def fibonacci(n):", "max_tokens": 5, "temperature": 0.9, "seed": 3})" << "\n";
    f << R"({"prompt_tokens": [1, 30, 31], "max_tokens": 7, "seed": 11, "temperature": 1.0})" << "\n";
  }
  const std::string flags = " --ignore-eos --max-num-seqs 2 --max-num-batched-tokens 16";
  const ProcessResult r = run_baton("generate --model " + model + " --prompts-file " + path + flags + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<nlohmann::json> lines;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 4u) << r.out;
  const nlohmann::json& summary = lines.back();
  EXPECT_TRUE(summary["summary"].get<bool>());
  EXPECT_EQ(summary["requests"].get<int>(), 3);
  EXPECT_EQ(summary["generated_tokens"].get<int>(), 6 + 5 + 7);
  EXPECT_GT(summary["output_tokens_per_s"].get<double>(), 0.0);
  EXPECT_GT(summary["wall_s"].get<double>(), 0.0);
  std::map<int, nlohmann::json> by_index;
  for (std::size_t i = 0; i + 1 < lines.size(); ++i) by_index[lines[i]["index"].get<int>()] = lines[i];
  ASSERT_EQ(by_index.size(), 3u);
  for (const char* key : {"prompt_tokens", "generated_tokens", "token_ids", "text", "finish_reason", "time_to_first_token_s"}) {
    EXPECT_TRUE(by_index[0].contains(key)) << key;
  }
  // Each result is what a run of that prompt alone gives (the batch changes no token).
  const ProcessResult alone0 = run_baton("generate --model " + model + " --prompt-tokens 1,20,21,22 --max-tokens 6" + flags +
                                         " --json");
  ASSERT_EQ(alone0.exit_code, 0) << alone0.err;
  EXPECT_EQ(by_index[0]["token_ids"], nlohmann::json::parse(alone0.out)["token_ids"]);
  const ProcessResult alone2 = run_baton("generate --model " + model +
                                         " --prompt-tokens 1,30,31 --max-tokens 7 --seed 11 --temperature 1.0" + flags + " --json");
  ASSERT_EQ(alone2.exit_code, 0) << alone2.err;
  EXPECT_EQ(by_index[2]["token_ids"], nlohmann::json::parse(alone2.out)["token_ids"]);
  EXPECT_EQ(by_index[1]["generated_tokens"].get<int>(), 5);

  // Without --json: every completion under its index.
  const ProcessResult plain = run_baton("generate --model " + model + " --prompts-file " + path + flags);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_THAT(plain.out, HasSubstr("=== 0 ==="));
  EXPECT_THAT(plain.out, HasSubstr("=== 2 ==="));
  EXPECT_THAT(plain.err, HasSubstr("3 prompts"));
  std::filesystem::remove(path);
}

// Prefix caching is on by default, EAGLE-3 drafting included, and --no-enable-prefix-caching (vLLM's
// flag) turns it off: one request at a time, the second of two equal prompts reuses two blocks of
// 16 tokens, or none; the tokens are the same either way.
TEST(GenerateCliBatch, PrefixCachingIsOnByDefaultAndTheFlagTurnsItOff) {
  const std::string path =
      std::filesystem::temp_directory_path() / ("baton_cache_prompts_" + std::to_string(::getpid()) + ".jsonl");
  {
    std::ofstream f(path);
    std::string ids = "1";
    for (int i = 0; i < 39; ++i) ids += "," + std::to_string(5 + (i * 7) % 90);
    for (int i = 0; i < 2; ++i) f << R"({"prompt_tokens": [)" << ids << R"(], "max_tokens": 6})" << "\n";
  }
  const std::string spec = R"('{"method":"eagle3","num_speculative_tokens":2,"model":")" +
                           testing::fixture_path("spec/eagle3-llama-f32") + R"("}')";
  const std::string base = "generate --model " + testing::fixture_path("llama-f32") + " --prompts-file " + path +
                           " --ignore-eos --max-num-seqs 1 --json --speculative-config " + spec;
  std::map<std::string, std::vector<nlohmann::json>> runs;
  for (const std::string flag : {"", " --no-enable-prefix-caching"}) {
    const ProcessResult r = run_baton(base + flag);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::istringstream in(r.out);
    std::vector<nlohmann::json> by_index(2);
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (j.contains("index")) by_index[j["index"].get<std::size_t>()] = j;
    }
    runs[flag] = by_index;
  }
  std::filesystem::remove(path);
  EXPECT_EQ(runs[""][0]["cached_prompt_tokens"], 0);
  EXPECT_EQ(runs[""][1]["cached_prompt_tokens"], 32);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(runs[" --no-enable-prefix-caching"][static_cast<std::size_t>(i)]["cached_prompt_tokens"], 0) << i;
    EXPECT_EQ(runs[" --no-enable-prefix-caching"][static_cast<std::size_t>(i)]["token_ids"],
              runs[""][static_cast<std::size_t>(i)]["token_ids"])
        << i;
  }
}

// A speculative batch reports its speculation without --json too: the line names the same counters
// the JSON summary has.
TEST(GenerateCliBatch, PromptsFileWithSpeculationPrintsItsCountersWithoutJson) {
  const std::string model = testing::fixture_path("llama-f32");
  const std::string path =
      std::filesystem::temp_directory_path() / ("baton_spec_prompts_" + std::to_string(::getpid()) + ".jsonl");
  {
    std::ofstream f(path);
    f << R"({"prompt_tokens": [5, 6, 7, 5, 6, 7, 5, 6], "max_tokens": 12})" << "\n";
    f << R"({"prompt_tokens": [9, 8, 9, 8, 9, 8], "max_tokens": 12})" << "\n";
  }
  const std::string base = "generate --model " + model + " --prompts-file " + path + " --ignore-eos " +
                           "--speculative-config '{\"method\":\"draft_model\",\"num_speculative_tokens\":3,\"model\":\"" +
                           testing::fixture_path("spec/") + "draft-llama-f32\"}'";
  const ProcessResult json_run = run_baton(base + " --json");
  ASSERT_EQ(json_run.exit_code, 0) << json_run.err;
  std::string last;
  std::vector<nlohmann::json> per_prompt;
  std::istringstream in(json_run.out);
  for (std::string line; std::getline(in, line);) {
    if (!last.empty()) per_prompt.push_back(nlohmann::json::parse(last));
    last = line;
  }
  const nlohmann::json spec = nlohmann::json::parse(last)["spec"];
  ASSERT_GT(spec["num_drafts"].get<int>(), 0) << spec.dump();
  // Each prompt's line has its own counters, per position and by draft length too, and they add
  // up to the summary's (per position; proposals are counted per request there, per step in the
  // summary).
  ASSERT_EQ(per_prompt.size(), 2u) << json_run.out;
  std::int64_t drafts = 0, accepted = 0;
  std::vector<std::int64_t> per_position(3, 0);
  for (const nlohmann::json& p : per_prompt) {
    const nlohmann::json& s = p["spec"];
    ASSERT_TRUE(s.is_object()) << p.dump();
    EXPECT_EQ(s["method"], "draft_model");
    const auto positions = s["accepted_per_position"].get<std::vector<std::int64_t>>();
    ASSERT_EQ(positions.size(), 3u) << p.dump();
    const auto lengths = s["proposals_by_length"].get<std::vector<std::int64_t>>();
    ASSERT_EQ(lengths.size(), 4u) << p.dump();
    // Every step asked for k = 3 (the last ones may have had no room left to draft).
    EXPECT_EQ(lengths[0] + lengths[1] + lengths[2], 0) << p.dump();
    EXPECT_GE(lengths[3], s["num_drafts"].get<std::int64_t>()) << p.dump();
    std::int64_t sum = 0;
    for (std::size_t i = 0; i < 3; ++i) {
      per_position[i] += positions[i];
      sum += positions[i];
    }
    EXPECT_EQ(sum, s["num_accepted_tokens"].get<std::int64_t>()) << p.dump();
    drafts += s["num_drafts"].get<std::int64_t>();
    accepted += s["num_accepted_tokens"].get<std::int64_t>();
  }
  EXPECT_EQ(drafts, spec["num_drafts"].get<std::int64_t>());
  EXPECT_EQ(accepted, spec["num_accepted_tokens"].get<std::int64_t>());
  EXPECT_EQ(per_position, spec["accepted_per_position"].get<std::vector<std::int64_t>>());
  const ProcessResult plain = run_baton(base);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_THAT(plain.err, HasSubstr("speculative draft_model: " + std::to_string(spec["num_drafts"].get<int>()) + " drafts, " +
                                   std::to_string(spec["num_draft_tokens"].get<int>()) + " draft tokens, " +
                                   std::to_string(spec["num_accepted_tokens"].get<int>()) + " accepted"));
  std::filesystem::remove(path);
}

TEST(GenerateCliBatch, ABadLineIsNamedAndNothingRuns) {
  const std::string path = std::filesystem::temp_directory_path() / ("baton_bad_" + std::to_string(::getpid()) + ".jsonl");
  {
    std::ofstream f(path);
    f << R"({"prompt_tokens": [1, 2]})" << "\n" << R"({"prompt_tokens": [1, 2], "temprature": 1})" << "\n";
  }
  const ProcessResult r = run_baton("generate --model " + testing::fixture_path("llama-f32") + " --prompts-file " + path);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr(path + ":2:"));
  EXPECT_THAT(r.err, HasSubstr("temprature"));
  EXPECT_TRUE(r.out.empty());
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace baton
