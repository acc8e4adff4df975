// baton-router as a real process: flags (repeated and comma-separated node lists, bad flags exit 2),
// the bound address printed on stdout, a request through it to a scripted decode node, a clean
// exit on SIGTERM, and streams held open on a few threads (gRPC's callback API, the event-driven
// HTTP listener: no thread per request).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <memory>
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

// The Threads: line of /proc/PID/status.
int threads_of(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::atoi(line.c_str() + 8);
  }
  return -1;
}

// An HTTP client of a streamed completion on a socket of its own, read up to its first event.
struct SseStream {
  int fd = -1;
  ~SseStream() {
    if (fd >= 0) ::close(fd);
  }
  // Sends the request and reads until the first "data:" event arrived; false on any failure.
  bool open(int port, const std::string& body) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return false;
    const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                                "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) return false;
    std::string got;
    char buf[4096];
    while (got.find("data: ") == std::string::npos) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 20000) <= 0) return false;
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return false;
      got.append(buf, static_cast<std::size_t>(n));
    }
    return got.rfind("HTTP/1.1 200", 0) == 0;
  }
};

// Requests held open cost the router no thread each: 100 gRPC and 100 HTTP streams, every one in
// the streaming state at once (the decode node holds each after its first message), leave the
// router with fewer threads than a thread-per-request router would need for a third of them.
TEST(RouterBinary, HoldsManyStreamsOnAFewThreads) {
  constexpr int kStreams = 100;  // of each kind
  testing::Cluster cluster(0);
  cluster.decode.messages = {{11}};
  cluster.decode.hold_after_messages = true;
  Process p = spawn({"--port", "0", "--http-port", "0", "--decode", cluster.decode.address(), "--log-level", "warn",
                     "--max-running-requests", "1000", "--max-queued-requests", "0"});
  std::string line, http_line;
  for (int i = 0; i < 4 && line.rfind("baton-router ready on ", 0) != 0; ++i) {
    line = first_line(p);
    if (line.rfind("baton-router http on ", 0) == 0) http_line = line;
  }
  ASSERT_THAT(line, StartsWith("baton-router ready on 127.0.0.1:"));
  ASSERT_THAT(http_line, StartsWith("baton-router http on http://127.0.0.1:"));
  const int http_port = std::atoi(http_line.c_str() + http_line.rfind(':') + 1);
  const int idle_threads = threads_of(p.pid);
  testing::RouterClient client(port_of(line));

  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<baton::v1::GenerateResponse>>> readers;
  for (int i = 0; i < kStreams; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    readers.push_back(client.stub().Generate(contexts.back().get(), testing::token_request({5, 6, 7})));
  }
  for (auto& reader : readers) {
    baton::v1::GenerateResponse first;
    ASSERT_TRUE(reader->Read(&first));
    ASSERT_GT(first.token_ids_size(), 0);
  }
  std::vector<SseStream> http(kStreams);
  for (SseStream& s : http) {
    ASSERT_TRUE(s.open(http_port, R"({"model":"baton-tiny-code","prompt":[5,6,7],"max_tokens":8,"stream":true})"));
  }
  ASSERT_EQ(cluster.decode.log.count("Cancelled"), 0);
  const int held_threads = threads_of(p.pid);
  EXPECT_LT(held_threads, 64) << "with " << 2 * kStreams << " streams open (" << idle_threads << " idle)";

  // Every one ends when its client goes, on the decode node too.
  for (auto& c : contexts) c->TryCancel();
  for (auto& reader : readers) EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  http.clear();
  EXPECT_TRUE(cluster.decode.log.wait_for_count("Cancelled ", 2 * kStreams, 20000));
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
  // The Kubernetes and tool-calling flags' values are checked before anything starts.
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--decode-dns", "baton-decode"},
                                             {"--prefill-dns", "baton-prefill:0"},
                                             {"--decode-dns", "localhost:7001", "--dns-family", "ipv5"},
                                             {"--forget-unreachable-ms", "-1"},
                                             {"--drain-timeout-ms", "0"},
                                             // Tool calling: "auto" needs a parser, and one it knows.
                                             {"--http-port", "0", "--enable-auto-tool-choice"},
                                             {"--http-port", "0", "--tool-call-parser", "xml"}}) {
    EXPECT_EQ(wait_exit(spawn(args)), 1) << args[0];
  }
}

}  // namespace
}  // namespace baton::router
