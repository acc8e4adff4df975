// libbaton_client (sdk/cpp) against a live cluster: `baton up --port 0` as a real process (the
// bundled family, decode node drafting with EAGLE-3, KV over UCX), checked against the local
// reference, a `baton generate --model` process (one colocated engine without a router).
//
// The test links the SDK and baton_common only: one process must not hold both the SDK's and
// baton_proto's generated api.proto code (each registers it with libprotobuf), so the cluster and
// the reference run as processes, not in-process as the serving tests do.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "baton/client.h"
#include "common/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/scratch.h"

namespace {

using ::testing::HasSubstr;

const std::string kFamily = std::string(BATON_SOURCE_DIR) + "/models/baton-tiny-code";
const std::string kPrompt = "def fibonacci(n):";

// What one local `baton generate --json` printed (stdout's JSON line, stderr interleaved).
nlohmann::json run_local_generate(const std::vector<std::string>& flags) {
  baton::Subprocess::Options o;
  o.argv = {BATON_CLI_PATH, "generate", "--model", kFamily + "/target", "--json"};
  o.argv.insert(o.argv.end(), flags.begin(), flags.end());
  auto p = baton::Subprocess::start(std::move(o));
  EXPECT_TRUE(p.ok()) << p.status();
  auto line = (*p)->wait_for_line("\"finish_reason\"", std::chrono::seconds(120));
  EXPECT_TRUE(line.ok()) << line.status();
  EXPECT_EQ((*p)->wait(std::chrono::seconds(60)), 0) << (*p)->log_tail();
  return nlohmann::json::parse(line.ok() ? *line : "null");
}

// `baton up --port 0 EXTRA...` as a process; returns the router's address ("" on failure).
std::string start_cluster(const std::string& log_dir, const std::vector<std::string>& extra, baton::Subprocess** out) {
  baton::Subprocess::Options o;
  o.argv = {BATON_CLI_PATH, "up", "--port", "0", "--kv-cache-memory", "0.125", "--bin-dir", BATON_BINARY_DIR,
            "--log-dir", log_dir};
  o.argv.insert(o.argv.end(), extra.begin(), extra.end());
  auto p = baton::Subprocess::start(std::move(o));
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return "";
  *out = p->release();
  // "baton up: router ready on HOST:PORT (...)"
  auto line = (*out)->wait_for_line(" ready on ", std::chrono::seconds(180));
  EXPECT_TRUE(line.ok()) << line.status();
  if (!line.ok()) return "";
  const std::size_t at = line->find(" ready on ") + 10;
  return line->substr(at, line->find(' ', at) - at);
}

void stop_cluster(baton::Subprocess*& cluster) {
  if (cluster) {
    EXPECT_EQ(cluster->terminate(std::chrono::seconds(20)), 0) << cluster->log_tail();
  }
  delete cluster;
  cluster = nullptr;
}

class SdkClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    log_dir_ = baton::testing::scratch_path("baton-sdk-test").string();  // kept when a test fails
    address_ = start_cluster(log_dir_, {}, &cluster_);
  }
  static void TearDownTestSuite() { stop_cluster(cluster_); }
  void SetUp() override { ASSERT_FALSE(address_.empty()) << "the cluster did not start"; }

  // A request that runs for seconds: as many tokens as the model's length allows, EOS ignored.
  static baton::GenerateRequest long_request() {
    auto info = baton::Client(address_).model_info();
    EXPECT_TRUE(info.ok()) << info.status().to_string();
    baton::GenerateRequest r = greedy(info.ok() ? info->max_model_len - 64 : 1000);
    r.sampling.ignore_eos = true;
    return r;
  }

  static baton::GenerateRequest greedy(int max_tokens) {
    baton::GenerateRequest r;
    r.prompt = kPrompt;
    r.sampling.temperature = 0;
    r.sampling.max_tokens = max_tokens;
    return r;
  }

  static inline baton::Subprocess* cluster_ = nullptr;
  static inline std::string address_;
  static inline std::string log_dir_;
};

TEST_F(SdkClientTest, GenerateEqualsLocalGenerateWithUsage) {
  const nlohmann::json local = run_local_generate({"--prompt", kPrompt, "--max-tokens", "48", "--temperature", "0"});
  baton::Client client(address_);
  auto r = client.generate(greedy(48));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->text, local["text"].get<std::string>());
  EXPECT_EQ(r->token_ids, local["token_ids"].get<std::vector<std::int32_t>>());
  EXPECT_EQ(baton::finish_reason_name(r->finish_reason), local["finish_reason"].get<std::string>());
  EXPECT_FALSE(r->request_id.empty());
  EXPECT_EQ(r->usage.prompt_tokens, local["prompt_tokens"].get<int>());
  EXPECT_EQ(r->usage.completion_tokens, static_cast<int>(r->token_ids.size()));
  // The decode node drafts with EAGLE-3 (baton up's default): the counts come through.
  EXPECT_GT(r->usage.speculation.num_drafts, 0);
  EXPECT_GE(r->usage.speculation.num_draft_tokens, r->usage.speculation.num_accepted_tokens);
  EXPECT_GT(r->usage.timings.end_to_end_ms, 0);
  EXPECT_GE(r->usage.timings.end_to_end_ms, r->usage.timings.time_to_first_token_ms);
  EXPECT_FALSE(r->usage.decode_node.empty());
  EXPECT_GT(r->client_total_ms, 0);
}

TEST_F(SdkClientTest, CallbackAndReaderStreamsJoinToTheCompletion) {
  baton::Client client(address_);
  auto whole = client.generate(greedy(40));
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();

  std::string text;
  std::vector<std::int32_t> ids;
  int deltas = 0;
  auto streamed = client.stream(greedy(40), [&](const baton::Delta& d) {
    ++deltas;
    text += d.text;
    ids.insert(ids.end(), d.token_ids.begin(), d.token_ids.end());
  });
  ASSERT_TRUE(streamed.ok()) << streamed.status().to_string();
  EXPECT_GT(deltas, 1);
  EXPECT_EQ(text, whole->text);
  EXPECT_EQ(ids, whole->token_ids);
  EXPECT_EQ(streamed->text, whole->text);

  baton::Stream s = client.open_stream(greedy(40));
  baton::GenerateResult joined;
  bool finished = false;
  while (auto d = s.next()) {
    EXPECT_FALSE(finished) << "a delta after the one with the finish reason";
    finished = d->finish_reason != baton::FinishReason::kNone;
    joined.append(*d);
  }
  EXPECT_TRUE(finished);
  EXPECT_FALSE(s.next().has_value()) << "next() after the end";
  EXPECT_TRUE(s.status().ok()) << s.status().to_string();
  EXPECT_EQ(joined.text, whole->text);
  EXPECT_EQ(joined.token_ids, whole->token_ids);
  EXPECT_EQ(joined.finish_reason, baton::FinishReason::kLength);
  EXPECT_EQ(joined.usage.completion_tokens, 40);
}

TEST_F(SdkClientTest, LogprobsComeWithEveryToken) {
  baton::Client client(address_);
  baton::GenerateRequest req = greedy(8);
  req.sampling.logprobs = 2;
  auto r = client.generate(req);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->logprobs.size(), r->token_ids.size());
  for (std::size_t i = 0; i < r->logprobs.size(); ++i) {
    EXPECT_EQ(r->logprobs[i].token, r->token_ids[i]);
    EXPECT_LE(r->logprobs[i].logprob, 0.0f);
    ASSERT_EQ(r->logprobs[i].top.size(), 2u);
    EXPECT_EQ(r->logprobs[i].top[0].token, r->token_ids[i]) << "greedy: the sampled token is the most likely";
  }
}

TEST_F(SdkClientTest, AbortStopsARunningRequest) {
  baton::Client client(address_);
  baton::GenerateRequest req = long_request();
  req.request_id = "sdk-abort-" + std::to_string(::getpid());
  baton::Stream s = client.open_stream(req);
  auto first = s.next();
  ASSERT_TRUE(first.has_value()) << s.status().to_string();
  EXPECT_EQ(first->request_id, req.request_id);
  auto found = client.abort(req.request_id);
  ASSERT_TRUE(found.ok()) << found.status().to_string();
  EXPECT_TRUE(*found);
  baton::GenerateResult rest;
  while (auto d = s.next()) rest.append(*d);
  EXPECT_TRUE(s.status().ok()) << s.status().to_string();
  EXPECT_EQ(rest.finish_reason, baton::FinishReason::kAbort);

  auto missing = client.abort("no-such-request");
  ASSERT_TRUE(missing.ok()) << missing.status().to_string();
  EXPECT_FALSE(*missing);
}

TEST_F(SdkClientTest, DeadlinesPerCallAndPerClient) {
  const baton::GenerateRequest req = long_request();
  baton::Client client(address_);
  auto r = client.generate(req, {.timeout = std::chrono::milliseconds(300)});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), baton::StatusCode::kDeadlineExceeded) << r.status().to_string();

  baton::Client hasty(address_, {.default_timeout = std::chrono::milliseconds(300)});
  baton::Stream s = hasty.open_stream(req);
  while (s.next()) {
  }
  EXPECT_EQ(s.status().code(), baton::StatusCode::kDeadlineExceeded) << s.status().to_string();
  // The cluster serves on: the next request completes.
  EXPECT_TRUE(client.generate(greedy(4)).ok());
}

TEST_F(SdkClientTest, ModelInfoAndTokenizeMatchTheModel) {
  baton::Client client(address_);
  auto info = client.model_info();
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->model, "target");
  const nlohmann::json config = nlohmann::json::parse(std::ifstream(kFamily + "/target/config.json"));
  EXPECT_EQ(info->vocab_size, config["vocab_size"].get<int>());
  EXPECT_TRUE(info->has_tokenizer);
  EXPECT_THAT(info->speculative_config, HasSubstr("eagle3"));
  EXPECT_EQ(info->num_prefill_nodes, 1);
  EXPECT_EQ(info->num_decode_nodes, 1);

  // Tokenize equals what Generate counted for the same text (and what local generate counted).
  auto tokens = client.tokenize({kPrompt, std::nullopt});
  ASSERT_TRUE(tokens.ok()) << tokens.status().to_string();
  EXPECT_EQ(tokens->prompt, kPrompt);
  auto r = client.generate(greedy(1));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(static_cast<int>(tokens->ids.size()), r->usage.prompt_tokens);
  baton::GenerateRequest by_ids = greedy(16);
  by_ids.prompt = tokens->ids;
  auto from_ids = client.generate(by_ids);
  auto from_text = client.generate(greedy(16));
  ASSERT_TRUE(from_ids.ok() && from_text.ok());
  EXPECT_EQ(from_ids->token_ids, from_text->token_ids);
}

TEST_F(SdkClientTest, ErrorsCarryTheCodeAndTheRoutersMessage) {
  baton::Client client(address_);
  baton::GenerateRequest bad = greedy(8);
  bad.sampling.top_p = 2.0f;
  auto r = client.generate(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), baton::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("top_p"));
  EXPECT_THAT(r.status().to_string(), HasSubstr("INVALID_ARGUMENT: "));

  // Nothing listens on port 1.
  baton::Client nowhere("127.0.0.1:1", {.default_timeout = std::chrono::seconds(5)});
  auto info = nowhere.model_info();
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), baton::StatusCode::kUnavailable) << info.status().to_string();
}

// ---- a cluster with TLS and API keys (`baton up --tls --api-keys-file`) ---------------------

constexpr const char* kKey = "cpp-sdk-test-key";

class SdkTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    log_dir_ = baton::testing::scratch_path("baton-sdk-tls-test").string();
    std::filesystem::create_directories(log_dir_);
    const std::string keys = log_dir_ + "/api-keys";
    std::ofstream(keys) << kKey << "\n";
    // --served-model-name: one of the router's flags `baton up` passes through.
    address_ = start_cluster(log_dir_, {"--tls", "--api-keys-file", keys, "--served-model-name", "sdk-tls-model"},
                             &cluster_);
  }
  static void TearDownTestSuite() { stop_cluster(cluster_); }
  void SetUp() override { ASSERT_FALSE(address_.empty()) << "the cluster did not start"; }

  static baton::ClientOptions options(std::optional<std::string> key, bool tls = true) {
    baton::ClientOptions o;
    o.default_timeout = std::chrono::seconds(60);
    o.api_key = std::move(key);
    if (tls) {
      auto t = baton::TlsOptions::from_ca_file(log_dir_ + "/ca.pem");
      EXPECT_TRUE(t.ok()) << t.status().to_string();
      if (t.ok()) o.tls = *t;
    }
    return o;
  }

  static inline baton::Subprocess* cluster_ = nullptr;
  static inline std::string address_;
  static inline std::string log_dir_;
};

TEST_F(SdkTlsTest, TlsAndAKeyGiveTheLocalTokens) {
  const nlohmann::json local = run_local_generate({"--prompt", kPrompt, "--max-tokens", "32", "--temperature", "0"});
  baton::Client client(address_, options(kKey));
  baton::GenerateRequest r;
  r.prompt = kPrompt;
  r.sampling.max_tokens = 32;
  r.sampling.temperature = 0;
  auto got = client.generate(r);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->token_ids, local["token_ids"].get<std::vector<std::int32_t>>());
  EXPECT_EQ(got->text, local["text"].get<std::string>());
}

TEST_F(SdkTlsTest, BatonUpPassesTheRoutersFlagsThrough) {
  auto info = baton::Client(address_, options(kKey)).model_info();
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->model, "sdk-tls-model");
}

TEST_F(SdkTlsTest, TheKeyComesFromTheEnvironmentWhenNotGiven) {
  ::setenv("BATON_API_KEY", kKey, 1);
  baton::Client from_env(address_, options(std::nullopt));
  ::unsetenv("BATON_API_KEY");
  auto info = from_env.model_info();
  EXPECT_TRUE(info.ok()) << info.status().to_string();
}

TEST_F(SdkTlsTest, WithoutTheKeyOrTlsTheCallFails) {
  ::unsetenv("BATON_API_KEY");
  for (const std::optional<std::string>& key : {std::optional<std::string>(), std::optional<std::string>("wrong")}) {
    auto r = baton::Client(address_, options(key)).model_info();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), baton::StatusCode::kUnauthenticated) << r.status().to_string();
    EXPECT_THAT(r.status().message(), ::testing::Not(HasSubstr("wrong")));
  }
  auto plain = baton::Client(address_, options(kKey, /*tls=*/false)).model_info();
  ASSERT_FALSE(plain.ok());
  EXPECT_EQ(plain.status().code(), baton::StatusCode::kUnavailable) << plain.status().to_string();
  EXPECT_FALSE(baton::TlsOptions::from_ca_file(log_dir_ + "/missing.pem").ok());
}

}  // namespace
