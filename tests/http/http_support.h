// What the HTTP API tests share: a copy of the bundled target model with a ChatML chat template
// (in place of its own), the real clients (curl, the `openai` npm client, a raw socket for a
// client that hangs up), and the local reference (`baton generate`, the real binary).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "cli/cluster.h"
#include "common/status.h"
#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/scratch.h"

namespace baton::testing {

using nlohmann::json;

inline std::string source_path(const std::string& part) { return std::string(BATON_SOURCE_DIR) + "/" + part; }

// A file the caller removes once read (directories that outlive a call are scratch_path's).
inline std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
}

// The bundled target (weights and tokenizer linked, not copied) with a small ChatML-style
// template, so that chat requests have a template to render; named baton-tiny-chat.
inline std::string chat_model_dir() {
  namespace fs = std::filesystem;
  const fs::path target = source_path("models/baton-tiny-code/target");
  const fs::path dir = scratch_path("baton-http-model") / "baton-tiny-chat";
  fs::create_directories(dir);
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"}) {
    std::error_code ec;
    fs::remove(dir / f, ec);
    fs::create_symlink(target / f, dir / f);
  }
  std::ifstream in(target / "tokenizer_config.json");
  json config = json::parse(in);
  config["chat_template"] =
      "{% for m in messages %}{{ '### ' + m['role'] + '\\n' + m['content'] + '\\n' }}{% endfor %}"
      "{% if add_generation_prompt %}{{ '### assistant\\n' }}{% endif %}";
  std::ofstream(dir / "tokenizer_config.json") << config.dump(2);
  return dir.string();
}

struct ProcessOutput {
  int code = -1;
  std::string out;  // stdout and stderr
};

// Runs a program to its exit (deadline 120 s) and returns everything it printed.
inline ProcessOutput run_program(std::vector<std::string> argv) {
  static int counter = 0;
  const std::string log = temp_path("baton-http-run-" + std::to_string(++counter)).string();
  Subprocess::Options o;
  o.argv = std::move(argv);
  o.log_path = log;
  auto p = Subprocess::start(std::move(o));
  BATON_CHECK(p.ok(), p.status().ToString());
  const std::optional<int> code = (*p)->wait(std::chrono::seconds(120));
  BATON_CHECK(code.has_value(), "the process did not exit in 120 s");
  // The log is complete once the output closed.
  (void)(*p)->wait_for_line("\x01never printed\x01", std::chrono::seconds(10));
  p->reset();
  std::ifstream in(log);
  ProcessOutput r{*code, std::string(std::istreambuf_iterator<char>(in), {})};
  std::filesystem::remove(log);
  return r;
}

struct HttpResult {
  int status = 0;
  std::string body;
  std::string headers;  // the response's header lines, as received
  json json_body() const { return json::parse(body, nullptr, /*allow_exceptions=*/false); }
};

// One request with /usr/bin/curl. method "GET" or "POST" (body as JSON); key "" : no header;
// `extra`: more curl arguments (e.g. --cacert FILE, -u USER:PASSWORD).
inline HttpResult curl(const std::string& url, const std::string& body = "", const std::string& key = "",
                       bool post = true, const std::vector<std::string>& extra = {}) {
  static int counter = 0;
  const std::string out = temp_path("baton-http-curl-" + std::to_string(++counter)).string();
  const std::string headers = out + ".headers";
  std::vector<std::string> argv = {"/usr/bin/curl", "-sS", "-N", "--max-time", "120", "-o", out, "-D", headers,
                                   "-w", "%{http_code}"};
  if (!key.empty()) argv.insert(argv.end(), {"-H", "Authorization: Bearer " + key});
  if (post) argv.insert(argv.end(), {"-H", "Content-Type: application/json", "--data-binary", body});
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back(url);
  const ProcessOutput p = run_program(argv);
  HttpResult r;
  EXPECT_EQ(p.code, 0) << p.out;
  r.status = std::atoi(p.out.c_str());
  std::ifstream in(out);
  r.body.assign(std::istreambuf_iterator<char>(in), {});
  std::ifstream h(headers);
  r.headers.assign(std::istreambuf_iterator<char>(h), {});
  std::filesystem::remove(out);
  std::filesystem::remove(headers);
  return r;
}

// The `data:` payloads of an event stream, in order.
inline std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const std::size_t end = body.find("\n\n", at);
    out.push_back(body.substr(at + 6, end - at - 6));
    if (end == std::string::npos) break;
    at = end + 2;
  }
  return out;
}

// The reference: `baton generate --json` (the real binary, one local engine, no speculation).
inline json baton_generate(const std::string& model, std::vector<std::string> args) {
  std::vector<std::string> argv = {BATON_CLI_PATH, "generate", "--model", model, "--json", "--log-level", "error"};
  argv.insert(argv.end(), args.begin(), args.end());
  const ProcessOutput p = run_program(argv);
  BATON_CHECK(p.code == 0, "baton generate failed: " + p.out);
  const std::size_t brace = p.out.find("\n{") == std::string::npos ? p.out.find('{') : p.out.find("\n{") + 1;
  return json::parse(p.out.substr(brace, p.out.find('\n', brace) - brace));
}

// The official `openai` npm client's answers to `cases` (tests/http/client/openai_check.mjs: one
// object per case); an empty array, with a failure added, when the script did not answer.
inline json openai_client(const std::string& base, const std::string& key, const json& cases) {
  const ProcessOutput node =
      run_program({"/usr/bin/node", source_path("tests/http/client/openai_check.mjs"), base, key, cases.dump()});
  EXPECT_EQ(node.code, 0) << node.out;
  const std::size_t at = node.out.find("RESULT ");
  if (node.code != 0 || at == std::string::npos) {
    ADD_FAILURE() << "no RESULT line: " << node.out;
    return json::array();
  }
  return json::parse(node.out.substr(at + 7, node.out.find('\n', at) - at - 7));
}

// The newcomer's cluster: `baton up --port 0 --http-port 0` on the bundled model (EAGLE-3, KV over
// UCX) with `flags` added, its logs in a scratch directory named after `name`. `base` is the HTTP
// API's URL (".../v1"); empty, with a failure added, when it did not come up.
struct BundledUp {
  std::unique_ptr<Subprocess> process;
  std::string base;
};

inline BundledUp start_bundled_up(const std::string& name, const std::string& bin_dir,
                                  const std::vector<std::string>& flags = {}) {
  const std::string log_dir = scratch_path(name).string();
  Subprocess::Options o;
  o.argv = {BATON_CLI_PATH, "up", "--port", "0", "--http-port", "0", "--kv-cache-memory", "0.125", "--bin-dir",
            bin_dir, "--log-dir", log_dir};
  o.argv.insert(o.argv.end(), flags.begin(), flags.end());
  o.log_path = log_dir + "/up.log";
  std::filesystem::create_directories(log_dir);
  auto up = Subprocess::start(std::move(o));
  BundledUp out;
  if (!up.ok()) {
    ADD_FAILURE() << up.status();
    return out;
  }
  out.process = std::move(*up);
  // "baton up: OpenAI API on http://HOST:PORT/v1 (...)"
  auto line = out.process->wait_for_line("OpenAI API on ", std::chrono::seconds(180));
  if (!line.ok()) {
    ADD_FAILURE() << line.status() << out.process->log_tail();
    return out;
  }
  const std::size_t at = line->find("OpenAI API on ") + 14;
  out.base = line->substr(at, line->find(' ', at) - at);
  return out;
}

// A raw HTTP/1.1 connection: sends one request and reads what comes, so that a test can hang up
// in the middle of a stream.
class RawConnection {
 public:
  RawConnection(const std::string& host, int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);
    BATON_CHECK(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0, "connect failed");
    timeval tv{30, 0};  // every read has a deadline
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~RawConnection() { close(); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  void post(const std::string& path, const std::string& body, const std::string& key) {
    const std::string r = str_cat("POST ", path, " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n",
                                  "Authorization: Bearer ", key, "\r\nContent-Length: ", body.size(), "\r\n\r\n", body);
    BATON_CHECK(::send(fd_, r.data(), r.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(r.size()), "send failed");
  }
  // Bytes as they are (a partial request, say).
  void send_raw(const std::string& bytes) {
    BATON_CHECK(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()),
                "send failed");
  }
  // Reads until `needle` arrived; false at EOF or the read deadline.
  bool read_until(const std::string& needle) {
    char buf[4096];
    while (received_.find(needle) == std::string::npos) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed_by_peer_ = n == 0;
        return false;
      }
      received_.append(buf, static_cast<std::size_t>(n));
    }
    return true;
  }
  // Reads until the server closes the connection (true) or the read deadline passes (false).
  bool read_until_closed() {
    (void)read_until(std::string(1, '\0'));  // never sent by an HTTP server
    return closed_by_peer_;
  }
  const std::string& received() const { return received_; }

 private:
  int fd_ = -1;
  std::string received_;
  bool closed_by_peer_ = false;
};

}  // namespace baton::testing
