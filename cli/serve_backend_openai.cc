// The OpenAI-compatible HTTP backend of `baton bench serve` (serve_backend.h): one streamed POST
// per request with cpp-httplib's client, server-sent events parsed as they arrive.
#include <chrono>

#include "cli/serve_backend.h"
#include "common/status.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace baton::cli {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// Splits "http://host:port[/v1]" into the scheme+authority httplib wants and the API prefix.
absl::Status split_url(const std::string& url, std::string* origin, std::string* prefix) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) return absl::InvalidArgumentError(str_cat("--base-url must start with http://, got '", url, "'"));
  const std::size_t slash = url.find('/', scheme.size());
  *origin = url.substr(0, slash);
  std::string path = slash == std::string::npos ? "" : url.substr(slash);
  while (!path.empty() && path.back() == '/') path.pop_back();
  *prefix = path.empty() ? "/v1" : path;
  return absl::OkStatus();
}

// Reads the events of one SSE body as bytes arrive; each complete "data:" payload goes to `on_data`.
class SseParser {
 public:
  template <typename F>
  void feed(const char* data, std::size_t n, F&& on_data) {
    buffer_.append(data, n);
    std::size_t end;
    while ((end = buffer_.find("\n\n")) != std::string::npos) {
      std::string event = buffer_.substr(0, end);
      buffer_.erase(0, end + 2);
      std::size_t pos = 0;
      while (pos <= event.size()) {
        std::size_t nl = event.find('\n', pos);
        if (nl == std::string::npos) nl = event.size();
        std::string line = event.substr(pos, nl - pos);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.rfind("data:", 0) == 0) {
          std::size_t start = 5;
          if (start < line.size() && line[start] == ' ') ++start;
          on_data(line.substr(start));
        }
        pos = nl + 1;
      }
    }
  }
  const std::string& rest() const { return buffer_; }

 private:
  std::string buffer_;
};

class OpenAiServeBackend final : public ServeBackend {
 public:
  OpenAiServeBackend(std::string origin, std::string prefix, bool chat, std::string ca_file, std::string api_key)
      : origin_(std::move(origin)),
        prefix_(std::move(prefix)),
        chat_(chat),
        ca_file_(std::move(ca_file)),
        api_key_(std::move(api_key)) {}

  absl::StatusOr<ServeModelInfo> model_info() override {
    httplib::Client client(origin_);
    if (!ca_file_.empty()) client.set_ca_cert_path(ca_file_.c_str());
    client.set_connection_timeout(10);
    client.set_read_timeout(10);
    auto res = client.Get(prefix_ + "/models", headers());
    if (!res) return absl::UnavailableError(str_cat("GET ", origin_, prefix_, "/models: ", httplib::to_string(res.error())));
    if (res->status != 200) return absl::UnavailableError(str_cat("GET ", prefix_, "/models: HTTP ", res->status, ": ", res->body));
    auto j = json::parse(res->body, nullptr, false);
    if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty()) {
      return absl::InvalidArgumentError(str_cat("GET ", prefix_, "/models: no model listed: ", res->body));
    }
    ServeModelInfo info;
    info.model = j["data"][0].value("id", "");
    model_ = info.model;
    return info;
  }

  ServeResult send(const ServePrompt& prompt, const ServeSampling& sampling) override {
    const bool chat = chat_ || prompt.chat;
    json body = {{"model", model_},
                 {"max_tokens", sampling.max_tokens},
                 {"temperature", sampling.temperature},
                 {"stream", true},
                 {"stream_options", {{"include_usage", true}}}};
    if (sampling.seed != 0) body["seed"] = sampling.seed;
    if (sampling.ignore_eos) body["ignore_eos"] = true;
    if (chat) {
      body["messages"] = json::array({{{"role", "user"}, {"content", prompt.text}}});
    } else if (!prompt.token_ids.empty()) {
      body["prompt"] = prompt.token_ids;
    } else {
      body["prompt"] = prompt.text;
    }

    ServeResult r;
    httplib::Client client(origin_);
    if (!ca_file_.empty()) client.set_ca_cert_path(ca_file_.c_str());
    client.set_connection_timeout(30);
    client.set_read_timeout(1800);
    httplib::Request req;
    req.method = "POST";
    req.path = prefix_ + (chat ? "/chat/completions" : "/completions");
    req.headers = headers();
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    SseParser sse;
    bool done = false;
    std::string error_body;
    const auto start = Clock::now();
    req.content_receiver = [&](const char* data, std::size_t n, std::uint64_t, std::uint64_t) {
      const double now = std::chrono::duration<double>(Clock::now() - start).count();
      sse.feed(data, n, [&](const std::string& payload) {
        if (payload == "[DONE]") {
          done = true;
          return;
        }
        auto j = json::parse(payload, nullptr, false);
        if (j.is_discarded()) {
          error_body = payload;
          return;
        }
        if (j.contains("error")) error_body = j["error"].dump();
        if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
          const json& c = j["choices"][0];
          std::string piece;
          if (c.contains("text") && c["text"].is_string()) piece = c["text"].get<std::string>();
          if (c.contains("delta") && c["delta"].contains("content") && c["delta"]["content"].is_string()) {
            piece = c["delta"]["content"].get<std::string>();
          }
          if (!piece.empty()) {
            if (r.chunk_times.empty()) r.ttft_s = now;
            r.chunk_times.push_back(now);
          }
        }
        if (j.contains("usage") && j["usage"].is_object()) {
          const json& u = j["usage"];
          r.prompt_tokens = u.value("prompt_tokens", 0);
          r.output_tokens = u.value("completion_tokens", 0);
          if (u.contains("speculation") && u["speculation"].is_object()) {
            const json& s = u["speculation"];
            r.num_drafts = s.value("num_drafts", 0);
            r.num_draft_tokens = s.value("num_draft_tokens", 0);
            r.num_accepted_tokens = s.value("num_accepted_tokens", 0);
          }
        }
      });
      return true;
    };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    const bool sent = client.send(req, res, err);
    r.e2e_s = std::chrono::duration<double>(Clock::now() - start).count();
    if (!sent) {
      r.error = str_cat("HTTP: ", httplib::to_string(err));
    } else if (res.status != 200) {
      r.error = str_cat("HTTP ", res.status, ": ", error_body.empty() ? sse.rest() : error_body);
    } else if (!error_body.empty()) {
      r.error = error_body;
    } else if (!done) {
      r.error = "stream ended without [DONE]";
    } else if (r.chunk_times.empty()) {
      r.error = "no tokens";
    } else {
      r.ok = true;
      if (r.output_tokens == 0) r.output_tokens = static_cast<std::int64_t>(r.chunk_times.size());
    }
    return r;
  }

 private:
  httplib::Headers headers() const {
    httplib::Headers h;
    if (!api_key_.empty()) h.emplace("Authorization", "Bearer " + api_key_);
    return h;
  }

  const std::string origin_, prefix_;
  const bool chat_;
  const std::string ca_file_;
  const std::string api_key_;
  std::string model_;  // set by model_info(), before any send()
};

}  // namespace

absl::StatusOr<std::unique_ptr<ServeBackend>> make_openai_backend(const std::string& base_url, bool chat,
                                                                  const std::string& ca_file, const std::string& api_key) {
  std::string origin, prefix;
  BATON_RETURN_IF_ERROR(split_url(base_url, &origin, &prefix));
  return std::unique_ptr<ServeBackend>(std::make_unique<OpenAiServeBackend>(origin, prefix, chat, ca_file, api_key));
}

}  // namespace baton::cli
