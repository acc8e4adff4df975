// The security library without a network: API key files (plain and hashed), the constant-time
// match and the key ids it reports, the Authorization header forms, the TLS flag rules and the
// start-up checks of certificate files, and the randomness of ids.
#include <set>

#include "common/flags.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "security/api_keys.h"
#include "security/random.h"
#include "tests/security/security_test_support.h"

namespace baton::testing {
namespace {

using ::testing::HasSubstr;

TEST(ApiKeys, PlainAndHashedLinesMatchTheirKeysOnly) {
  const auto dir = scratch_path("security-keys");
  std::filesystem::create_directories(dir);
  write_text(dir / "keys", "# operators' keys\n\n  alpha-key-1  \nsha256:" + security::sha256_hex("beta-key-2") + "\n");
  auto keys = security::ApiKeys::from_file((dir / "keys").string());
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->size(), 2u);
  const auto alpha = keys->match("alpha-key-1");
  const auto beta = keys->match("beta-key-2");
  ASSERT_TRUE(alpha && beta);
  EXPECT_NE(*alpha, *beta);
  EXPECT_EQ(alpha->size(), 16u);
  // The id is the key's hash prefix: it names the caller without revealing the key.
  EXPECT_EQ(*alpha, security::sha256_hex("alpha-key-1").substr(0, 16));
  EXPECT_FALSE(keys->match("alpha-key-"));
  EXPECT_FALSE(keys->match("alpha-key-12"));
  EXPECT_FALSE(keys->match(""));
  // A hashed line does not accept its own hash as the key.
  EXPECT_FALSE(keys->match(security::sha256_hex("beta-key-2")));
}

TEST(ApiKeys, MalformedFilesNameTheFileAndLine) {
  const auto dir = scratch_path("security-keys-bad");
  std::filesystem::create_directories(dir);
  write_text(dir / "bad-hash", "good-key\nsha256:abc\n");
  auto bad = security::ApiKeys::from_file((dir / "bad-hash").string());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("line 2"));
  EXPECT_THAT(bad.status().message(), HasSubstr("bad-hash"));
  write_text(dir / "empty", "# nothing\n\n");
  EXPECT_THAT(security::ApiKeys::from_file((dir / "empty").string()).status().message(), HasSubstr("holds no key"));
  EXPECT_FALSE(security::ApiKeys::from_file((dir / "missing").string()).ok());
}

TEST(ApiKeys, BearerAndBasicHeadersPresentTheKey) {
  EXPECT_EQ(security::presented_key("Bearer k1").value_or(""), "k1");
  EXPECT_EQ(security::presented_key("bearer   k1 ").value_or(""), "k1");
  // Basic base64("user:k2"): what a browser sends after the live page's login prompt.
  EXPECT_EQ(security::presented_key("Basic dXNlcjprMg==").value_or(""), "k2");
  EXPECT_EQ(security::presented_key("Basic OmszNA==").value_or(""), "k34");  // ":k34", empty user
  EXPECT_FALSE(security::presented_key("Basic dXNlcg=="));                 // "user": no password
  EXPECT_FALSE(security::presented_key("Basic !!!!"));
  EXPECT_FALSE(security::presented_key("Token k1"));
  EXPECT_FALSE(security::presented_key("Bearer"));
  EXPECT_FALSE(security::presented_key("k1"));
}

TEST(Random, IdsAreDistinctHexOfTheAskedLength) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = security::random_hex(16);
    ASSERT_EQ(id.size(), 32u);
    ASSERT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos);
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 1000u);
  EXPECT_NE(security::random_u64(), security::random_u64());
}

// Parses argv (after a program name) with the TLS flags.
absl::StatusOr<security::TlsConfig> tls_from(std::vector<std::string> args, security::TlsRole role) {
  args.insert(args.begin(), "program");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  auto flags = parse_flags(security::tls_flag_specs(), static_cast<int>(argv.size()), argv.data());
  if (!flags.ok()) return flags.status();
  return security::tls_config_from_flags(*flags, role);
}

TEST(TlsConfig, EveryListenerNeedsTlsOrAnExplicitInsecure) {
  using security::TlsRole;
  const auto none = tls_from({}, TlsRole::kNode);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.status().message(), HasSubstr("--insecure"));
  EXPECT_EQ(tls_from({}, TlsRole::kRouter).status().code(), absl::StatusCode::kFailedPrecondition);
  auto insecure = tls_from({"--insecure"}, TlsRole::kNode);
  ASSERT_TRUE(insecure.ok());
  EXPECT_FALSE(insecure->cluster_tls());
  EXPECT_THAT(security::describe(*insecure, TlsRole::kNode), HasSubstr("PLAIN TEXT"));
}

TEST(TlsConfig, GoodFilesPassAndEachMistakeIsNamed) {
  using security::TlsRole;
  const auto dir = scratch_path("security-tls-config");
  TestCa cluster(dir / "cluster", "cluster CA");
  TestCa stranger(dir / "stranger", "stranger CA");
  cluster.issue("node");
  cluster.issue("old", {"127.0.0.1"}, std::chrono::hours(-1));
  stranger.issue("rogue");
  const std::vector<std::string> good = {"--tls-cert", cluster.cert_file("node"), "--tls-key", cluster.key_file("node"),
                                         "--tls-ca", cluster.ca_file()};
  auto ok = tls_from(good, TlsRole::kNode);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(ok->cluster_tls());

  struct Case {
    std::vector<std::string> args;
    TlsRole role;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--tls-cert", cluster.cert_file("node")}, TlsRole::kNode, "go together"},
      {{"--tls-cert", cluster.cert_file("node"), "--tls-key", cluster.key_file("node")}, TlsRole::kNode,
       "--tls-ca is needed"},
      {{"--tls-cert", cluster.cert_file("node"), "--tls-key", cluster.key_file("node")}, TlsRole::kRouter,
       "--tls-ca is needed"},
      {{"--tls-ca", cluster.ca_file()}, TlsRole::kNode, "needs --tls-cert"},
      {{"--tls-cert", cluster.cert_file("node"), "--tls-key", cluster.key_file("old"), "--tls-ca", cluster.ca_file()},
       TlsRole::kNode, "is not the key of the certificate"},
      {{"--tls-cert", cluster.cert_file("old"), "--tls-key", cluster.key_file("old"), "--tls-ca", cluster.ca_file()},
       TlsRole::kNode, "has expired"},
      {{"--tls-cert", stranger.cert_file("rogue"), "--tls-key", stranger.key_file("rogue"), "--tls-ca",
        cluster.ca_file()},
       TlsRole::kNode, "is not signed by the CA"},
      {{"--tls-cert", cluster.key_file("node"), "--tls-key", cluster.key_file("node"), "--tls-ca", cluster.ca_file()},
       TlsRole::kNode, "holds no PEM certificate"},
      {{"--tls-cert", (dir / "nope.pem").string(), "--tls-key", cluster.key_file("node"), "--tls-ca",
        cluster.ca_file()},
       TlsRole::kNode, "nope.pem"},
      {{"--insecure", "--tls-cert", cluster.cert_file("node"), "--tls-key", cluster.key_file("node"), "--tls-ca",
        cluster.ca_file()},
       TlsRole::kNode, "contradict"},
      {{"--insecure", "--tls-reload-s", "0"}, TlsRole::kNode, "--tls-reload-s"},
  };
  for (const Case& c : cases) {
    const auto r = tls_from(c.args, c.role);
    ASSERT_FALSE(r.ok()) << c.message;
    EXPECT_THAT(r.status().message(), HasSubstr(c.message)) << c.args.front();
  }
  // The router may serve its public port with TLS and reach nodes in plain text, if told so.
  auto router = tls_from({"--tls-cert", cluster.cert_file("node"), "--tls-key", cluster.key_file("node"), "--insecure"},
                         TlsRole::kRouter);
  ASSERT_TRUE(router.ok()) << router.status();
  EXPECT_TRUE(router->public_tls());
  EXPECT_FALSE(router->cluster_tls());
}

}  // namespace
}  // namespace baton::testing
