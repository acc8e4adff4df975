// A real local cluster with TLS and API keys (cli/cluster.h, as `baton up --tls --api-keys-file`):
// the router's gRPC and HTTPS ports serve only callers with a key, and only over TLS; its node
// registry (--internal-port) only cluster members, and a bounded number of nodes; `baton
// generate --endpoint` and the official `openai` npm client with the CA and a key get the local
// `baton generate` tokens; the nodes' ports and /metrics admit cluster members only (a plain-text
// caller, a TLS caller without a certificate and one with another CA's are all refused); the
// router's /metrics wants a key.
#include <chrono>
#include <cstdlib>

#include "baton/v1/api.grpc.pb.h"
#include "baton/v1/node.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "security/grpc_credentials.h"
#include "security/public_api_channel.h"
#include "tests/http/http_support.h"
#include "tests/security/security_test_support.h"

namespace baton::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kKey = "cluster-test-key";
constexpr const char* kPrompt = "def fibonacci(n):";

class SecureCluster : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cli::ClusterOptions o;
    o.model_dir = source_path("models/baton-tiny-code/target");
    o.bin_dir = BATON_BINARY_DIR;
    o.log_dir = scratch_path("baton-secure-cluster").string();
    o.node_args = {"--kv-cache-memory", "0.125"};
    o.http_port = 0;
    o.metrics = true;
    o.tls = true;
    o.router_args = {"--internal-port", "0", "--max-registered-nodes", "4"};
    o.expose_topology = false;  // as a production router runs
    std::filesystem::create_directories(o.log_dir);
    o.api_keys_file = o.log_dir + "/api-keys";
    // A plain key, and a second one stored only as its hash.
    std::ofstream(o.api_keys_file) << kKey << "\nsha256:" << sha256_of("second-key") << "\n";
    auto c = cli::LocalCluster::start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = c->release();
    stranger_ = new TestCa(scratch_path("baton-secure-cluster-stranger"), "stranger CA");
    stranger_->issue("rogue");
  }
  static void TearDownTestSuite() {
    delete cluster_;
    delete stranger_;
    cluster_ = nullptr;
  }

  static std::string sha256_of(const std::string& key);
  static std::string ca() { return cluster_->ca_file(); }
  static std::string tls_dir() { return std::filesystem::path(cluster_->ca_file()).parent_path() / "tls"; }

  // The router's public API over TLS with `key` ("" : none).
  static std::unique_ptr<v1::Baton::Stub> router(const std::string& key, const std::string& ca_file = ca()) {
    auto channel = security::public_api_channel(cluster_->router_address(), ca_file, key);
    EXPECT_TRUE(channel.ok()) << channel.status();
    return v1::Baton::NewStub(*channel);
  }

  static grpc::Status model_info(v1::Baton::Stub& stub) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::ModelInfo info;
    return stub.GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info);
  }

  static inline cli::LocalCluster* cluster_ = nullptr;
  static inline TestCa* stranger_ = nullptr;
};

std::string SecureCluster::sha256_of(const std::string& key) {
  const ProcessOutput p = run_program({"/bin/sh", "-c", "printf %s '" + key + "' | sha256sum"});
  return p.out.substr(0, 64);
}

// `baton generate` with the flags; env: extra environment (BATON_API_KEY).
ProcessOutput baton_generate(const std::vector<std::string>& flags, const std::string& key) {
  std::vector<std::string> argv = {"/usr/bin/env", "-u", "BATON_API_KEY"};
  if (!key.empty()) argv.push_back("BATON_API_KEY=" + key);
  argv.insert(argv.end(), {BATON_CLI_PATH, "generate"});
  argv.insert(argv.end(), flags.begin(), flags.end());
  return run_program(argv);
}

json json_line(const std::string& out) {
  const std::size_t at = out.find("{\"");
  return at == std::string::npos ? json() : json::parse(out.substr(at, out.find('\n', at) - at), nullptr, false);
}

TEST_F(SecureCluster, GenerateWithTheCaAndAKeyGivesTheLocalTokens) {
  const std::vector<std::string> request = {"--prompt", kPrompt, "--max-tokens", "24", "--temperature", "0", "--json"};
  std::vector<std::string> local = {"--model", source_path("models/baton-tiny-code/target")};
  local.insert(local.end(), request.begin(), request.end());
  std::vector<std::string> remote = {"--endpoint", cluster_->router_address(), "--tls-ca", ca()};
  remote.insert(remote.end(), request.begin(), request.end());
  const ProcessOutput expected = baton_generate(local, "");
  ASSERT_EQ(expected.code, 0) << expected.out;
  const ProcessOutput got = baton_generate(remote, kKey);
  ASSERT_EQ(got.code, 0) << got.out;
  EXPECT_EQ(json_line(got.out)["token_ids"], json_line(expected.out)["token_ids"]);
  EXPECT_FALSE(json_line(got.out)["token_ids"].empty());
  // The remote JSON names the engine that decoded, as the local one names its own.
  EXPECT_THAT(json_line(got.out).value("backend", ""), HasSubstr("decode role"));
  EXPECT_THAT(json_line(expected.out).value("backend", ""), HasSubstr("colocated role"));
  // The hashed key works as well as the plain one.
  const ProcessOutput second = baton_generate(remote, "second-key");
  EXPECT_EQ(second.code, 0) << second.out;
  // Without a key: refused, and said so.
  const ProcessOutput refused = baton_generate(remote, "");
  EXPECT_EQ(refused.code, 1) << refused.out;
  EXPECT_THAT(refused.out, HasSubstr("missing API key"));
}

TEST_F(SecureCluster, EveryPublicCallNeedsAKnownKey) {
  // No key, a wrong one, and a hash of the right one (a hash is not the key).
  for (const std::string& key : std::vector<std::string>{"", "not-a-key", "sha256:" + sha256_of(kKey)}) {
    SCOPED_TRACE("key '" + key + "'");
    auto stub = router(key);
    EXPECT_EQ(model_info(*stub).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      v1::TokenizeRequest r;
      r.set_text(kPrompt);
      v1::TokenizeResponse out;
      EXPECT_EQ(stub->Tokenize(&ctx, r, &out).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    }
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      v1::AbortRequest r;
      r.set_request_id("someone-elses");
      v1::AbortResponse out;
      EXPECT_EQ(stub->Abort(&ctx, r, &out).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::GenerateRequest r;
    r.set_text(kPrompt);
    auto reader = stub->Generate(&ctx, r);
    v1::GenerateResponse m;
    EXPECT_FALSE(reader->Read(&m)) << "no token without a key";
    const grpc::Status s = reader->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    if (!key.empty()) {
      EXPECT_THAT(s.error_message(), Not(HasSubstr(key)));
    }
  }
  EXPECT_TRUE(model_info(*router(kKey)).ok());
}

TEST_F(SecureCluster, PlainTextAndStrangersToTheRouterFail) {
  // Plain text to the TLS port, and TLS that does not trust the cluster's CA.
  EXPECT_EQ(model_info(*router(kKey, "")).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(model_info(*router(kKey, stranger_->ca_file())).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(model_info(*router(kKey)).ok());  // and it still serves
}

TEST_F(SecureCluster, NodePortsAdmitClusterMembersOnly) {
  security::TlsConfig member;
  member.cert_file = tls_dir() + "/router.pem";
  member.key_file = tls_dir() + "/router-key.pem";
  member.ca_file = ca();
  security::TlsConfig rogue = stranger_->config("rogue");
  rogue.ca_file = ca();  // it trusts the cluster, the cluster does not trust it
  auto no_cert = security::client_channel_credentials(ca());
  ASSERT_TRUE(no_cert.ok());
  for (const char* role : {"decode", "prefill"}) {
    const std::string address = cluster_->nodes(role).front()->address;
    SCOPED_TRACE(std::string(role) + " node at " + address);
    EXPECT_EQ(health_check(address, grpc::InsecureChannelCredentials()).error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_EQ(health_check(address, *no_cert).error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_EQ(health_check(address, security::make_cluster_channel_credentials(rogue)).error_code(),
              grpc::StatusCode::UNAVAILABLE);
    const grpc::Status ok = health_check(address, security::make_cluster_channel_credentials(member));
    EXPECT_TRUE(ok.ok()) << ok.error_message();
  }
  // A rogue's Reserve never reaches the decode node.
  auto stub = node::v1::DecodeNode::NewStub(
      grpc::CreateChannel(cluster_->nodes("decode").front()->address, security::make_cluster_channel_credentials(rogue)));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  node::v1::ReserveRequest r;
  r.set_request_id("rogue");
  r.set_prompt_len(8192);
  node::v1::KvDestination out;
  EXPECT_EQ(stub->Reserve(&ctx, r, &out).error_code(), grpc::StatusCode::UNAVAILABLE);
}

grpc::Status register_node(const std::string& registry, std::shared_ptr<grpc::ChannelCredentials> credentials,
                           const std::string& address, const std::string& role = "prefill") {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto stub = node::v1::Registry::NewStub(grpc::CreateCustomChannel(registry, std::move(credentials), args));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  node::v1::RegisterNodeRequest r;
  r.set_address(address);
  r.set_role(role);
  node::v1::RegisterNodeResponse out;
  return stub->RegisterNode(&ctx, r, &out);
}

TEST_F(SecureCluster, TheRegistryTakesClusterMembersOnlyAndABoundedNumber) {
  auto line = cluster_->router().process->wait_for_line("baton-router internal on ", std::chrono::seconds(5));
  ASSERT_TRUE(line.ok()) << line.status();
  std::string registry = line->substr(line->find(" on ") + 4);
  registry = registry.substr(0, registry.find_first_of(" \r\n"));

  // A rogue node: plain text, TLS without a certificate, a certificate of another CA.
  security::TlsConfig rogue = stranger_->config("rogue");
  rogue.ca_file = ca();
  auto no_cert = security::client_channel_credentials(ca());
  ASSERT_TRUE(no_cert.ok());
  for (const auto& credentials : {grpc::InsecureChannelCredentials(), *no_cert,
                                  security::make_cluster_channel_credentials(rogue)}) {
    EXPECT_EQ(register_node(registry, credentials, "127.0.0.1:9").error_code(), grpc::StatusCode::UNAVAILABLE);
  }
  // The public port has no registry at all, even for a caller with a key.
  {
    auto channel = security::public_api_channel(cluster_->router_address(), ca(), kKey);
    ASSERT_TRUE(channel.ok());
    auto stub = node::v1::Registry::NewStub(*channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    node::v1::RegisterNodeRequest r;
    r.set_address("127.0.0.1:9");
    r.set_role("prefill");
    node::v1::RegisterNodeResponse out;
    EXPECT_EQ(stub->RegisterNode(&ctx, r, &out).error_code(), grpc::StatusCode::UNIMPLEMENTED);
  }

  // A member registers; malformed addresses and roles are refused; and no more than
  // --max-registered-nodes (4) are kept, however many are sent (the router dials each one it keeps).
  security::TlsConfig member;
  member.cert_file = tls_dir() + "/prefill-0.pem";
  member.key_file = tls_dir() + "/prefill-0-key.pem";
  member.ca_file = ca();
  auto credentials = security::make_cluster_channel_credentials(member);
  EXPECT_EQ(register_node(registry, credentials, "no-port").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(register_node(registry, credentials, "host:70000").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(register_node(registry, credentials, "127.0.0.1:9", "router").error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  int accepted = 0, refused = 0;
  for (int i = 0; i < 20; ++i) {
    const grpc::Status s = register_node(registry, credentials, "127.0.0.1:" + std::to_string(40000 + i));
    if (s.ok()) ++accepted;
    else if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) ++refused;
  }
  EXPECT_EQ(accepted, 4);
  EXPECT_EQ(refused, 16);
  EXPECT_TRUE(register_node(registry, credentials, "127.0.0.1:40000").ok()) << "registering again is idempotent";
  EXPECT_TRUE(model_info(*router(kKey)).ok()) << "the router serves on";
}

// One streamed request of `key` through the router, read to its end.
struct Streamed {
  grpc::Status status;
  std::vector<v1::GenerateResponse> messages;
  const v1::GenerateResponse& last() const { return messages.back(); }
};

Streamed stream_request(v1::Baton::Stub& stub, const v1::GenerateRequest& r) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  Streamed out;
  auto reader = stub.Generate(&ctx, r);
  for (v1::GenerateResponse m; reader->Read(&m);) out.messages.push_back(m);
  out.status = reader->Finish();
  return out;
}

v1::GenerateRequest greedy_request(const std::string& text, int max_tokens) {
  v1::GenerateRequest r;
  r.set_text(text);
  r.mutable_sampling()->set_temperature(0);
  r.mutable_sampling()->set_max_tokens(max_tokens);
  return r;
}

bool aborted(v1::Baton::Stub& stub, const std::string& id) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::AbortRequest r;
  r.set_request_id(id);
  v1::AbortResponse out;
  EXPECT_TRUE(stub.Abort(&ctx, r, &out).ok());
  return out.found();
}

TEST_F(SecureCluster, RequestsBelongToTheKeyThatStartedThem) {
  auto alice = router(kKey);
  auto bob = router("second-key");
  // Alice's long request, with an id of her choosing.
  v1::GenerateRequest long_one = greedy_request(kPrompt, 1500);
  long_one.mutable_sampling()->set_ignore_eos(true);
  long_one.set_request_id("shared-id");
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  auto reader = alice->Generate(&ctx, long_one);
  v1::GenerateResponse first;
  ASSERT_TRUE(reader->Read(&first));
  EXPECT_EQ(first.request_id(), "shared-id");
  // Bob cannot stop it, nor learn that it exists; his own "shared-id" runs beside it.
  EXPECT_FALSE(aborted(*bob, "shared-id"));
  v1::GenerateRequest bobs = greedy_request(kPrompt, 4);
  bobs.set_request_id("shared-id");
  const Streamed b = stream_request(*bob, bobs);
  EXPECT_TRUE(b.status.ok()) << b.status.error_message();
  // Alice's goes on, until she stops it.
  v1::GenerateResponse next;
  ASSERT_TRUE(reader->Read(&next));
  EXPECT_EQ(next.finish_reason(), v1::FINISH_REASON_UNSPECIFIED);
  EXPECT_TRUE(aborted(*alice, "shared-id"));
  v1::GenerateResponse m, last;
  while (reader->Read(&m)) last = m;
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(last.finish_reason(), v1::FINISH_REASON_ABORT);
  // Ids the router draws are 128 random bits.
  const Streamed drawn = stream_request(*alice, greedy_request(kPrompt, 2));
  ASSERT_TRUE(drawn.status.ok());
  EXPECT_THAT(drawn.last().request_id(), ::testing::MatchesRegex("req-[0-9a-f]{32}"));
}

TEST_F(SecureCluster, CachedTokensRevealNothingAcrossKeys) {
  // A prompt of several full blocks, new to this cluster.
  std::string prompt = "# probe " + std::to_string(::getpid()) + "\n";
  for (int i = 0; i < 12; ++i) prompt += "def helper_" + std::to_string(i) + "(value):\n    return value\n";
  auto alice = router(kKey);
  auto bob = router("second-key");
  const auto cached = [](v1::Baton::Stub& stub, const std::string& text, const std::string& salt = "") {
    v1::GenerateRequest r = greedy_request(text, 2);
    r.set_cache_salt(salt);
    const Streamed s = stream_request(stub, r);
    EXPECT_TRUE(s.status.ok()) << s.status.error_message();
    return s.messages.empty() ? -1 : s.last().usage().cached_prompt_tokens();
  };
  EXPECT_EQ(cached(*alice, prompt), 0);
  EXPECT_GT(cached(*alice, prompt), 0) << "a key finds its own prompt's blocks";
  EXPECT_EQ(cached(*bob, prompt), 0) << "another key must not see that alice sent it";
  EXPECT_GT(cached(*bob, prompt), 0);
  EXPECT_EQ(cached(*alice, prompt, "another-salt"), 0) << "cache_salt separates a key's own requests too";
}

TEST_F(SecureCluster, MalformedRequestIdsAreRefusedNamingTheField) {
  auto stub = router(kKey);
  for (const std::string& id : {std::string("forged\n[info] router: all is well"), std::string(300, 'x')}) {
    v1::GenerateRequest r = greedy_request(kPrompt, 2);
    r.set_request_id(id);
    const Streamed s = stream_request(*stub, r);
    EXPECT_EQ(s.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.status.error_message(), HasSubstr("request_id"));
  }
  auto log = cluster_->router().process->wait_for_line("all is well", std::chrono::milliseconds(200));
  EXPECT_FALSE(log.ok()) << "a client's text reached the router's log as a line of its own";
}

TEST_F(SecureCluster, ClientsAreToldNoNodeAddress) {
  auto stub = router(kKey);
  const Streamed ok = stream_request(*stub, greedy_request(kPrompt, 2));
  ASSERT_TRUE(ok.status.ok());
  EXPECT_TRUE(ok.last().usage().prefill_node().empty());
  EXPECT_TRUE(ok.last().usage().decode_node().empty());
  // A prompt past the decode node's limit: the refusal names the field, not the node's address.
  v1::GenerateRequest too_long;
  for (int i = 0; i < 5000; ++i) too_long.mutable_token_ids()->add_ids(5);
  too_long.mutable_sampling()->set_max_tokens(2);
  const Streamed refused = stream_request(*stub, too_long);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.status.error_message(), Not(HasSubstr("127.0.0.1")));
  EXPECT_THAT(refused.status.error_message(), HasSubstr("[address hidden]"));
}

TEST_F(SecureCluster, TheExecProbeAsksOverTheClusterCertificate) {
  // What the chart's probes run (`baton probe`): SERVING over the pod's own certificate; a probe
  // without one is refused like any stranger.
  const std::string decode = cluster_->nodes("decode").front()->address;
  const ProcessOutput ok = run_program({BATON_CLI_PATH, "probe", "--address", decode, "--tls-cert",
                                        tls_dir() + "/decode-0.pem", "--tls-key", tls_dir() + "/decode-0-key.pem",
                                        "--tls-ca", ca()});
  EXPECT_EQ(ok.code, 0) << ok.out;
  const ProcessOutput router = run_program({BATON_CLI_PATH, "probe", "--address", cluster_->router_address(),
                                            "--tls-cert", tls_dir() + "/router.pem", "--tls-key",
                                            tls_dir() + "/router-key.pem", "--tls-ca", ca()});
  EXPECT_EQ(router.code, 0) << router.out;
  const ProcessOutput plain = run_program({BATON_CLI_PATH, "probe", "--address", decode, "--timeout-ms", "2000"});
  EXPECT_EQ(plain.code, 1) << plain.out;
}

TEST_F(SecureCluster, HttpsWithAKeyForCurlAndTheOpenAiClient) {
  const std::string base = cluster_->router_http_url();
  ASSERT_THAT(base, ::testing::StartsWith("https://"));
  const std::vector<std::string> tls = {"--cacert", ca()};
  EXPECT_EQ(curl(base + "/models", "", kKey, false, tls).status, 200);
  EXPECT_EQ(curl(base + "/models", "", "", false, tls).status, 401);
  // Plain HTTP to the HTTPS port gets no answer from the API.
  const ProcessOutput plain =
      run_program({"/usr/bin/curl", "-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}",
                   "http" + base.substr(5) + "/models"});
  EXPECT_THAT(plain.out, Not(HasSubstr("200")));

  const std::string model = json::parse(curl(base + "/models", "", kKey, false, tls).body)["data"][0]["id"];
  const json body = {{"model", model}, {"prompt", kPrompt}, {"max_tokens", 24}, {"temperature", 0}};
  const HttpResult via_curl = curl(base + "/completions", body.dump(), kKey, true, tls);
  ASSERT_EQ(via_curl.status, 200) << via_curl.body;
  const json cases = json::array({{{"kind", "completion"}, {"stream", false}, {"params", body}},
                                  {{"kind", "completion"}, {"stream", true}, {"params", body}}});
  // Node trusts the cluster's CA through NODE_EXTRA_CA_CERTS.
  const ProcessOutput node = run_program({"/usr/bin/env", "NODE_EXTRA_CA_CERTS=" + ca(), "/usr/bin/node",
                                          source_path("tests/http/client/openai_check.mjs"), base, kKey, cases.dump()});
  ASSERT_EQ(node.code, 0) << node.out;
  const std::size_t at = node.out.find("RESULT ");
  ASSERT_NE(at, std::string::npos) << node.out;
  const json results = json::parse(node.out.substr(at + 7, node.out.find('\n', at) - at - 7));
  const std::string expected = json::parse(via_curl.body)["choices"][0]["text"];
  ASSERT_EQ(results.size(), 2u);
  for (const json& r : results) EXPECT_EQ(r.value("text", "<" + r.dump() + ">"), expected);
  // Without the key the official client gets a 401.
  const ProcessOutput unkeyed = run_program({"/usr/bin/env", "NODE_EXTRA_CA_CERTS=" + ca(), "/usr/bin/node",
                                             source_path("tests/http/client/openai_check.mjs"), base, "wrong", cases.dump()});
  EXPECT_THAT(unkeyed.out, HasSubstr("\"status\":401"));
}

TEST_F(SecureCluster, MetricsNeedAKeyOrAClusterCertificate) {
  const std::vector<std::string> tls = {"--cacert", ca()};
  const std::string router = "https://" + cluster_->router().metrics_address + "/metrics";
  EXPECT_EQ(curl(router, "", "", false, tls).status, 401);
  const HttpResult keyed = curl(router, "", kKey, false, tls);
  EXPECT_EQ(keyed.status, 200);
  EXPECT_THAT(keyed.body, HasSubstr("baton_"));
  const std::string decode = "https://" + cluster_->nodes("decode").front()->metrics_address + "/metrics";
  const std::vector<std::string> member = {"--cacert", ca(), "--cert", tls_dir() + "/router.pem", "--key",
                                           tls_dir() + "/router-key.pem"};
  EXPECT_EQ(curl(decode, "", "", false, member).status, 200);
  const ProcessOutput no_cert = run_program({"/usr/bin/curl", "-sS", "--max-time", "10", "--cacert", ca(), "-o",
                                             "/dev/null", "-w", "%{http_code}", decode});
  EXPECT_THAT(no_cert.out, Not(HasSubstr("200")));
}

}  // namespace
}  // namespace baton::testing
