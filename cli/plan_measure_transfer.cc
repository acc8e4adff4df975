#include "cli/plan_measure_transfer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <vector>

#include "cli/serve_backend.h"
#include "common/status.h"
#include "kv_transfer/done_waiter.h"
#include "kv_transfer/ucx_shm_memory.h"
#include "kv_transfer/ucx_transport.h"

namespace baton::cli {

namespace {

using Clock = std::chrono::steady_clock;

// CPU seconds this host has spent busy (every core, every process) since boot.
double host_busy_seconds() {
  std::ifstream stat("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  stat >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  if (!stat || cpu != "cpu") return -1;
  return (user + nice + system + irq + softirq + steal) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

bool is_loopback(const std::string& endpoint) {
  return endpoint.rfind("127.", 0) == 0 || endpoint.rfind("localhost:", 0) == 0 || endpoint.rfind("[::1]:", 0) == 0;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

absl::StatusOr<double> time_transfer(kv::KvSender& sender, const kv::TransferTarget& target,
                                     const std::vector<kv::Copy>& copies) {
  const auto start = Clock::now();
  BATON_ASSIGN_OR_RETURN(auto transfer, sender.begin(target));
  transfer->put(0, copies);
  kv::DoneWaiter waiter;
  transfer->finish(Clock::now() + std::chrono::seconds(60), waiter.callback());
  const std::optional<absl::Status> done = waiter.wait_until(Clock::now() + std::chrono::seconds(90));
  if (!done) return absl::DeadlineExceededError("a profiling KV transfer never reported its end");
  BATON_RETURN_IF_ERROR(*done);
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

absl::StatusOr<TransferSpeed> measure_kv_transfer() {
  constexpr std::size_t kTotal = 64u << 20, kCopy = 1u << 20, kBlock = 4096;
  // The receiver's pool as a decode node allocates it: UCX shared memory when there is any.
  BATON_ASSIGN_OR_RETURN(std::shared_ptr<kv::UcxShmMemory> shm, kv::UcxShmMemory::create());
  kv::OwnedRegion destination;
  if (shm) {
    BATON_ASSIGN_OR_RETURN(destination, shm->allocate(kTotal, "target"));
  } else {
    destination.base = new char[kTotal]();
    destination.bytes = kTotal;
    destination.owner = std::shared_ptr<void>(destination.base, [](void* p) { delete[] static_cast<char*>(p); });
  }
  std::vector<char> source(kTotal);
  std::mt19937_64 rng(7);
  for (std::size_t i = 0; i + 8 <= kTotal; i += 8) {
    const std::uint64_t v = rng();
    std::memcpy(source.data() + i, &v, 8);
  }
  BATON_ASSIGN_OR_RETURN(auto receiver,
                         kv::UcxKvReceiver::create({{"target", destination.base, destination.bytes}}, shm));
  BATON_ASSIGN_OR_RETURN(auto sender, kv::UcxKvSender::create({{"target", source.data(), source.size()}}));
  const kv::TransferTarget target{"plan-profile", "plan-profile-receiver", 1, receiver->descriptor(), ""};

  std::vector<kv::Copy> large;
  for (std::size_t off = 0; off < kTotal; off += kCopy) large.push_back({off, off, kCopy});
  const std::vector<kv::Copy> block{{0, 0, kBlock}};

  BATON_RETURN_IF_ERROR(time_transfer(*sender, target, block).status());  // connects
  std::vector<double> large_s, block_s;
  for (int rep = 0; rep < 5; ++rep) {
    BATON_ASSIGN_OR_RETURN(double s, time_transfer(*sender, target, large));
    large_s.push_back(s);
    BATON_ASSIGN_OR_RETURN(double b, time_transfer(*sender, target, block));
    block_s.push_back(b);
  }
  TransferSpeed speed;
  speed.latency_s = median(block_s);
  speed.gbps = static_cast<double>(kTotal) / std::max(1e-9, median(large_s) - speed.latency_s) / 1e9;
  return speed;
}

absl::StatusOr<DeploymentOverheads> measure_overheads(const std::string& endpoint, const std::string& tls_ca,
                                                      const std::string& api_key, int prompt_tokens,
                                                      const DeploymentProfile& profile, int k) {
  BATON_ASSIGN_OR_RETURN(auto backend, make_grpc_backend(endpoint, tls_ca, api_key));
  BATON_ASSIGN_OR_RETURN(const ServeModelInfo info, backend->model_info());
  if (info.vocab_size < 2) return absl::FailedPreconditionError(str_cat(endpoint, ": the deployment reports no vocabulary"));
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<std::int32_t> ids(1, info.vocab_size - 1);
  ServeSampling sampling;
  sampling.max_tokens = 33;
  sampling.ignore_eos = true;
  sampling.temperature = 0;

  BATON_ASSIGN_OR_RETURN(const double step, profile.decode_step_seconds(k, 1));
  const double bytes = prompt_tokens * profile.kv_bytes_per_token;
  const double transfer = bytes / (profile.kv_gbps * 1e9);
  const double prefill = profile.prefill_seconds(1, prompt_tokens);
  const double tail = profile.kv_latency_s + std::max(transfer / std::max(1, profile.num_layers), transfer - prefill);
  std::vector<double> request_extra, step_extra;
  double busy_before = 0, engine_busy = 0, tokens = 0;
  for (int rep = 0; rep < 6; ++rep) {
    if (rep == 1) busy_before = host_busy_seconds();
    ServePrompt prompt;
    prompt.token_ids.resize(static_cast<std::size_t>(prompt_tokens));
    for (auto& id : prompt.token_ids) id = ids(rng);
    const ServeResult r = backend->send(prompt, sampling);
    if (!r.ok) return absl::UnavailableError(str_cat(endpoint, ": a profiling request failed: ", r.error));
    if (rep == 0 || r.output_tokens < 2) continue;  // the first warms the deployment's paths
    request_extra.push_back(r.ttft_s - prefill - tail);
    const double tokens_per_step =
        r.num_drafts > 0 ? 1.0 + static_cast<double>(r.num_accepted_tokens) / static_cast<double>(r.num_drafts) : 1.0;
    const double tpot = (r.e2e_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1);
    step_extra.push_back(tpot * tokens_per_step - (step - profile.step_overhead_s));
    // What the engines did for it: the prefill, and each step at its measured time plus what the
    // request's TPOT shows beyond it (the node's own per-step work).
    engine_busy += prefill + (r.e2e_s - r.ttft_s);
    tokens += static_cast<double>(r.output_tokens);
  }
  double serving_cpu_per_token = 0;
  if (is_loopback(endpoint) && busy_before >= 0 && tokens > 0) {
    serving_cpu_per_token = std::max(0.0, (host_busy_seconds() - busy_before - engine_busy) / tokens);
  }
  if (request_extra.empty()) return absl::FailedPreconditionError(str_cat(endpoint, ": no profiling request produced 2+ tokens"));
  return DeploymentOverheads{std::max(0.0, median(request_extra)), std::max(0.0, median(step_extra)),
                             serving_cpu_per_token};
}

}  // namespace baton::cli
