#include "cli/router_client.h"

#include <chrono>

namespace baton::cli {

using Clock = std::chrono::steady_clock;

RemoteResult run_request(v1::Baton::Stub& stub, const v1::GenerateRequest& request,
                         const std::function<void(const std::string&)>& on_text, std::chrono::milliseconds timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  RemoteResult r;
  const auto start = Clock::now();
  auto reader = stub.Generate(&ctx, request);
  v1::GenerateResponse m;
  while (reader->Read(&m)) {
    if (r.ids.empty() && m.token_ids_size() > 0) r.ttft_s = std::chrono::duration<double>(Clock::now() - start).count();
    for (int i = 0; i < m.token_ids_size(); ++i) {
      r.ids.push_back(m.token_ids(i));
      TokenOutput t;
      t.token = m.token_ids(i);
      if (i < m.logprobs_size()) {
        t.logprob = m.logprobs(i).logprob();
        for (const v1::TopLogprob& top : m.logprobs(i).top()) t.top_logprobs.push_back({top.token(), top.logprob()});
      }
      r.tokens.push_back(std::move(t));
    }
    if (!m.text().empty()) {
      r.text += m.text();
      if (on_text) on_text(m.text());
    }
    if (m.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      r.finish_reason = m.finish_reason();
      r.error = m.error();
      r.usage = m.usage();
      r.hidden_states_path = m.kv_transfer_params().hidden_states_path();
    }
  }
  r.status = reader->Finish();
  r.total_s = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

}  // namespace baton::cli
