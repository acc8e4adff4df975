// baton-router as a real process: flags (repeated and comma-separated node lists, bad flags exit 2),
// the bound address printed on stdout, a request through it to a scripted decode node, and a
// clean exit on SIGTERM.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "cluster.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace baton::router {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

struct Process {
  pid_t pid = -1;
  int out = -1;  // the child's stdout
};

Process spawn(std::vector<std::string> args) {
  // Everything the child needs is made before fork: the test process has gRPC threads, so the
  // child may only make async-signal-safe calls.
  args.insert(args.begin(), {BATON_ROUTER_PATH, "--insecure"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int pipe_fds[2];
  EXPECT_EQ(::pipe(pipe_fds), 0);
  const int devnull = ::open("/dev/null", O_WRONLY);
  Process p;
  p.pid = ::fork();
  if (p.pid == 0) {
    ::dup2(pipe_fds[1], STDOUT_FILENO);
    ::dup2(devnull, STDERR_FILENO);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(devnull);
  ::close(pipe_fds[1]);
  p.out = pipe_fds[0];
  return p;
}

// The first line the child prints, waiting at most 20 s.
std::string first_line(const Process& p) {
  std::string line;
  char c;
  while (true) {
    pollfd fd{p.out, POLLIN, 0};
    if (::poll(&fd, 1, 20000) <= 0) return line;
    if (::read(p.out, &c, 1) != 1 || c == '\n') return line;
    line += c;
  }
}

int wait_exit(const Process& p) {
  int status = 0;
  ::waitpid(p.pid, &status, 0);
  ::close(p.out);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int port_of(const std::string& line) {
  const auto colon = line.rfind(':');
  return colon == std::string::npos ? 0 : std::atoi(line.c_str() + colon + 1);
}

TEST(RouterBinary, ServesUntilSigterm) {
  testing::Cluster cluster(0);
  Process p = spawn({"--port", "0", "--decode", cluster.decode.address() + ",127.0.0.1:1", "--decode", "127.0.0.1:2",
                     "--node-timeout-ms", "1000", "--log-level", "warn", "--expose-topology"});
  const std::string line = first_line(p);
  ASSERT_THAT(line, StartsWith("baton-router ready on 127.0.0.1:"));
  testing::RouterClient client(port_of(line));

  auto health = grpc::health::v1::Health::NewStub(client.channel());
  grpc::ClientContext context;
  grpc::health::v1::HealthCheckResponse response;
  ASSERT_TRUE(health->Check(&context, {}, &response).ok());
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);

  // Token-id mode (no --model); the one live decode node of three prefills locally.
  auto result = client.generate(testing::token_request({5, 6, 7}));
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_THAT(result.token_ids(), ElementsAre(10, 11, 12, 13, 14));
  EXPECT_EQ(result.last().usage().decode_node(), cluster.decode.address());
  grpc::ClientContext info_context;
  baton::v1::ModelInfo info;
  ASSERT_TRUE(client.stub().GetModelInfo(&info_context, {}, &info).ok());
  EXPECT_EQ(info.num_decode_nodes(), 1);
  EXPECT_FALSE(info.has_tokenizer());

  ::kill(p.pid, SIGTERM);
  EXPECT_EQ(wait_exit(p), 0);
}

TEST(RouterBinary, BadFlagsExitTwoAndHelpExitsZero) {
  Process bad = spawn({"--bogus"});
  EXPECT_EQ(wait_exit(bad), 2);
  Process bad_value = spawn({"--poll-interval-ms", "soon"});
  EXPECT_EQ(wait_exit(bad_value), 1);
  Process help = spawn({"--help"});
  EXPECT_THAT(first_line(help), HasSubstr("usage: baton-router"));
  EXPECT_EQ(wait_exit(help), 0);
  // The Kubernetes flags' values are checked before anything starts.
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--decode-dns", "baton-decode"},
                                             {"--prefill-dns", "baton-prefill:0"},
                                             {"--decode-dns", "localhost:7001", "--dns-family", "ipv5"},
                                             {"--forget-unreachable-ms", "-1"},
                                             {"--drain-timeout-ms", "0"}}) {
    EXPECT_EQ(wait_exit(spawn(args)), 1) << args[0];
  }
}

}  // namespace
}  // namespace baton::router
