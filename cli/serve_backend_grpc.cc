// The gRPC backend of `baton bench serve` (serve_backend.h): one Generate stream per request.
#include <chrono>

#include "baton/v1/api.grpc.pb.h"
#include "cli/serve_backend.h"
#include "common/status.h"
#include "grpcpp/grpcpp.h"
#include "proto/grpc_status_name.h"
#include "security/public_api_channel.h"

namespace baton::cli {

namespace {

using Clock = std::chrono::steady_clock;

class GrpcServeBackend final : public ServeBackend {
 public:
  explicit GrpcServeBackend(std::shared_ptr<grpc::Channel> channel) : stub_(v1::Baton::NewStub(std::move(channel))) {}

  absl::StatusOr<ServeModelInfo> model_info() override {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::ModelInfo info;
    grpc::Status s = stub_->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info);
    if (!s.ok()) return absl::UnavailableError(str_cat("GetModelInfo: ", s.error_message()));
    return ServeModelInfo{info.model(), info.vocab_size()};
  }

  ServeResult send(const ServePrompt& prompt, const ServeSampling& sampling) override {
    v1::GenerateRequest req;
    if (!prompt.token_ids.empty()) {
      for (std::int32_t t : prompt.token_ids) req.mutable_token_ids()->add_ids(t);
    } else if (prompt.chat) {
      v1::ChatMessage* m = req.mutable_chat()->add_messages();
      m->set_role("user");
      m->set_content(prompt.text);
    } else {
      req.set_text(prompt.text);
    }
    v1::SamplingParams* p = req.mutable_sampling();
    p->set_max_tokens(sampling.max_tokens);
    p->set_temperature(sampling.temperature);
    if (sampling.ignore_eos) p->set_ignore_eos(true);
    if (sampling.seed != 0) p->set_seed(sampling.seed);

    ServeResult r;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(30));
    const auto start = Clock::now();
    auto reader = stub_->Generate(&ctx, req);
    v1::GenerateResponse m;
    v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
    while (reader->Read(&m)) {
      const double now = std::chrono::duration<double>(Clock::now() - start).count();
      if (m.token_ids_size() > 0) {
        if (r.chunk_times.empty()) r.ttft_s = now;
        r.chunk_times.push_back(now);
        r.output_tokens += m.token_ids_size();
      }
      if (m.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
        finish = m.finish_reason();
        if (!m.error().empty()) r.error = m.error();
        const v1::Usage& u = m.usage();
        r.prompt_tokens = u.prompt_tokens();
        r.num_drafts = u.speculation().num_drafts();
        r.num_draft_tokens = u.speculation().num_draft_tokens();
        r.num_accepted_tokens = u.speculation().num_accepted_tokens();
      }
    }
    grpc::Status s = reader->Finish();
    r.e2e_s = std::chrono::duration<double>(Clock::now() - start).count();
    if (!s.ok()) {
      r.error = str_cat(grpc_code_name(s.error_code()), ": ", s.error_message());
    } else if (finish == v1::FINISH_REASON_ERROR || finish == v1::FINISH_REASON_ABORT) {
      if (r.error.empty()) r.error = finish == v1::FINISH_REASON_ABORT ? "aborted" : "error";
    } else if (r.output_tokens == 0) {
      r.error = "no tokens";
    } else {
      r.ok = true;
    }
    return r;
  }

 private:
  std::unique_ptr<v1::Baton::Stub> stub_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ServeBackend>> make_grpc_backend(const std::string& endpoint, const std::string& ca_file,
                                                                const std::string& api_key) {
  BATON_ASSIGN_OR_RETURN(auto channel, security::public_api_channel(endpoint, ca_file, api_key));
  return std::unique_ptr<ServeBackend>(std::make_unique<GrpcServeBackend>(std::move(channel)));
}

}  // namespace baton::cli
