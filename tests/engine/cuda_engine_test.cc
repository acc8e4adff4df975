// The engine on the CUDA backend against the CPU backend: for every fixture architecture, plain
// greedy decoding gives the same tokens on both devices, and requests whose tokens are picked on
// the device or on the host get in one batch what they get alone; on the GPU, greedy output with
// every speculative method is token-identical to the GPU's plain greedy output, and seeded sampled
// output with one-hot drafts to plain sampling's (the batch-invariant kernels make a token's logits
// the same in a decode step and in a verification); and a request prefilled by a prefill-role GPU
// engine and decoded by a decode-role one, its KV going through the pools' host mirrors (page-locked
// copies, fences), yields a colocated GPU engine's tokens for every method; and steps replayed from
// CUDA graphs (the default on a GPU) give exactly the tokens of steps launched op by op. With a BF16
// KV cache, every method stays lossless on the GPU, its plain greedy tokens are the CPU's with the
// same cache, and the handoff through the halved host mirrors still yields the colocated tokens.
// Every test skips on a machine without a GPU.
#include <cuda_runtime_api.h>

#include <cstring>
#include <map>
#include <optional>
#include <random>

#include "engine/engine.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "tests/engine/disaggregated.h"
#include "tests/engine/engine_jobs.h"
#include "tests/engine/fixtures.h"
#include "tests/engine/spec_methods.h"

namespace baton {
namespace {

using testing::fixture_names;
using testing::fixture_path;
using testing::Job;
using testing::method_cases;
using testing::MethodCase;

constexpr Device kCpu{DeviceType::kCpu, 0};
constexpr Device kCuda{DeviceType::kCuda, 0};

#define SKIP_WITHOUT_GPU() \
  if (available_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device"

// Greedy prompts with repeats (so n-gram and suffix find matches) and without, plus two seeded
// sampled requests riding in the same batches.
std::vector<Job> jobs_for(std::int32_t vocab) {
  std::mt19937 rng(23);
  std::vector<Job> jobs;
  for (int i = 0; i < 6; ++i) {
    Job j;
    j.id = "g" + std::to_string(i);
    std::vector<std::int32_t> motif(3 + rng() % 5);
    for (auto& t : motif) t = static_cast<std::int32_t>(3 + rng() % static_cast<unsigned>(vocab - 3));
    for (int r = 0; r <= i % 3; ++r) j.prompt.insert(j.prompt.end(), motif.begin(), motif.end());
    j.params.temperature = 0;
    j.params.max_tokens = 16 + i * 2;
    j.params.ignore_eos = true;
    jobs.push_back(j);
  }
  for (int i = 0; i < 2; ++i) {
    Job j;
    j.id = "s" + std::to_string(i);
    j.prompt = jobs[static_cast<std::size_t>(i)].prompt;
    j.params.temperature = 0.8f;
    j.params.seed = 7 + static_cast<std::uint64_t>(i);
    j.params.max_tokens = 12;
    j.params.ignore_eos = true;
    jobs.push_back(j);
  }
  return jobs;
}

std::unique_ptr<Engine> make_engine(const std::string& target, Device device,
                                    const std::optional<SpeculativeConfig>& spec = std::nullopt,
                                    NodeRole role = NodeRole::kColocated, GraphMode graphs = GraphMode::kAuto,
                                    DType kv_cache_dtype = DType::kF32, bool kv_transfer_in_device_memory = false) {
  EngineConfig c;
  c.role = role;
  c.kv_transfer_in_device_memory = kv_transfer_in_device_memory;
  c.kv_cache_dtype = kv_cache_dtype;
  c.graphs = graphs;
  c.model_dir = fixture_path(target);
  c.backend.device = device;
  c.backend.num_threads = 2;
  c.kv_cache_bytes = 8 << 20;
  c.scheduler.max_num_batched_tokens = 256;
  c.scheduler.max_num_seqs = 16;
  c.speculative = spec;
  auto e = Engine::create(c);
  BATON_CHECK(e.ok(), e.status().ToString());
  return std::move(*e);
}

void expect_same_greedy(const std::vector<Job>& jobs, const std::map<std::string, std::vector<std::int32_t>>& got,
                        const std::map<std::string, std::vector<std::int32_t>>& want, const std::string& what) {
  for (const Job& j : jobs) {
    if (j.params.greedy()) {
      EXPECT_EQ(got.at(j.id), want.at(j.id)) << what << ", request " << j.id;
    }
  }
}

class CudaFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaFixture, GreedyTokensEqualTheCpuBackends) {
  SKIP_WITHOUT_GPU();
  auto cpu = make_engine(GetParam(), kCpu);
  const auto jobs = jobs_for(cpu->model_config().vocab_size);
  const auto want = testing::run_jobs(*cpu, jobs);
  auto gpu = make_engine(GetParam(), kCuda);
  expect_same_greedy(jobs, testing::run_jobs(*gpu, jobs), want, GetParam() + " cuda vs cpu");
  EXPECT_EQ(gpu->block_pool().num_in_use(), 0) << "blocks leaked";
}

// Tokens picked on the device (greedy: argmax_rows; seeded sampling: sample_rows) and rows the
// host must read (logprobs, a repetition penalty) share batches: every request gets the tokens it
// gets alone, so each got its own rows and its own draws.
TEST_P(CudaFixture, DevicePicksAndHostRowsInOneBatchAreEachRequestsOwn) {
  SKIP_WITHOUT_GPU();
  auto gpu = make_engine(GetParam(), kCuda);
  std::vector<Job> jobs = jobs_for(gpu->model_config().vocab_size);
  Job logprobs = jobs[6];
  logprobs.id = "logprobs";
  logprobs.params.logprobs = 2;
  Job penalty = jobs[1];
  penalty.id = "penalty";
  penalty.params.repetition_penalty = 1.3f;
  jobs.push_back(logprobs);
  jobs.push_back(penalty);
  const auto mixed = testing::run_jobs(*gpu, jobs);
  for (const Job& j : jobs) {
    Job alone = j;
    alone.id = j.id + "-alone";
    const auto got = testing::run_jobs(*gpu, {alone});
    EXPECT_EQ(got.at(alone.id), mixed.at(j.id)) << GetParam() << ", request " << j.id;
  }
}

INSTANTIATE_TEST_SUITE_P(AllArchitectures, CudaFixture, ::testing::ValuesIn(fixture_names()),
                         [](const auto& p) { return testing::test_name_for(p.param); });

class CudaSpecEquivalence : public ::testing::TestWithParam<int> {};

TEST_P(CudaSpecEquivalence, GreedyOutputIsIdenticalToPlainDecodingOnBothDevices) {
  SKIP_WITHOUT_GPU();
  const MethodCase m = method_cases()[static_cast<std::size_t>(GetParam())];
  constexpr int k = 3;
  auto plain_gpu = make_engine(m.target, kCuda);
  const auto jobs = jobs_for(plain_gpu->model_config().vocab_size);
  const auto plain = testing::run_jobs(*plain_gpu, jobs);
  auto spec_gpu = make_engine(m.target, kCuda, m.config(k));
  const auto spec = testing::run_jobs(*spec_gpu, jobs);
  expect_same_greedy(jobs, spec, plain, m.label + " on cuda vs plain cuda");
  if (!m.probabilistic) {
    // One-hot drafts are matched against the token each row samples with the plain decoding draw
    // (sampled on the device, sample_rows), so seeded sampled output is plain sampling's too.
    for (const Job& j : jobs) {
      if (!j.params.greedy()) {
        EXPECT_EQ(spec.at(j.id), plain.at(j.id)) << m.label << ", sampled request " << j.id;
      }
    }
  }
  EXPECT_GT(spec_gpu->spec_stats()->num_draft_tokens, 0) << m.label << ": never speculated";
  EXPECT_EQ(spec_gpu->block_pool().num_in_use(), 0) << "blocks leaked";
  auto plain_cpu = make_engine(m.target, kCpu);
  expect_same_greedy(jobs, plain, testing::run_jobs(*plain_cpu, jobs), m.label + " target: cuda vs cpu");
}

INSTANTIATE_TEST_SUITE_P(AllMethods, CudaSpecEquivalence, ::testing::Range(0, static_cast<int>(method_cases().size())),
                         [](const auto& p) { return method_cases()[static_cast<std::size_t>(p.param)].label; });

// The method of a test parameter, -1 being no speculation. A copy: method_cases() returns a
// temporary, so a pointer into it would dangle.
std::optional<MethodCase> method_at(int i) {
  if (i < 0) return std::nullopt;
  return method_cases()[static_cast<std::size_t>(i)];
}

// Test names for a method index, -1 being no speculation.
std::string method_label(const ::testing::TestParamInfo<int>& p) {
  return p.param < 0 ? std::string("none") : method_cases()[static_cast<std::size_t>(p.param)].label;
}

class CudaHandoff : public ::testing::TestWithParam<int> {};

// A colocated engine and a prefill/decode pair on the GPU for method `m` (none: plain decoding),
// the pair moving KV through host mirrors or, with in_device_memory, from and into the pools.
struct HandoffEngines {
  std::unique_ptr<Engine> colocated, prefill, decode;
};
HandoffEngines handoff_engines(const std::optional<MethodCase>& m, bool in_device_memory) {
  const std::string target = m ? m->target : "llama-f32";
  constexpr int k = 3;
  HandoffEngines e;
  e.colocated = make_engine(target, kCuda, m ? std::optional(m->config(k)) : std::nullopt);
  e.prefill = make_engine(target, kCuda, m ? std::optional(m->config(1, NodeRole::kPrefill)) : std::nullopt,
                          NodeRole::kPrefill, GraphMode::kAuto, DType::kF32, in_device_memory);
  e.decode = make_engine(target, kCuda, m ? std::optional(m->config(k, NodeRole::kDecode)) : std::nullopt,
                         NodeRole::kDecode, GraphMode::kAuto, DType::kF32, in_device_memory);
  return e;
}

TEST_P(CudaHandoff, ThroughHostMirrorsTokensEqualColocated) {
  SKIP_WITHOUT_GPU();
  const std::optional<MethodCase> m = method_at(GetParam());
  auto [colocated, prefill, decode] = handoff_engines(m, /*in_device_memory=*/false);
  // The pools are in device memory; poison what the host can reach: a row the forward wrote but
  // that never came down, or a block never copied up, shows.
  for (Engine* e : {prefill.get(), decode.get()}) {
    ASSERT_TRUE(e->kv_host_mirrored());
    for (const KvPoolInfo& p : e->kv_pools()) std::memset(p.transfer.base, 0xff, p.transfer.bytes);
  }
  const auto jobs = jobs_for(colocated->model_config().vocab_size);
  const auto want = testing::run_jobs(*colocated, jobs);
  const auto got = testing::run_disaggregated(*prefill, *decode, jobs);
  const std::string label = m ? m->label : "none";
  for (const Job& j : jobs) EXPECT_EQ(got.at(j.id), want.at(j.id)) << label << ", request " << j.id;
  if (m) {
    EXPECT_EQ(decode->spec_stats()->num_accepted_tokens, colocated->spec_stats()->num_accepted_tokens) << label;
  }
  EXPECT_EQ(decode->block_pool().num_in_use(), 0) << "blocks leaked";
}

// The NCCL transport's way: no host mirrors, KV read from and written into the pools' device
// memory (here by cudaMemcpy between the two engines' pools). The layer callback must hear of a
// layer only once the device has written it, and commit must not overwrite what was written.
TEST_P(CudaHandoff, InDeviceMemoryTokensEqualColocated) {
  SKIP_WITHOUT_GPU();
  const std::optional<MethodCase> m = method_at(GetParam());
  auto [colocated, prefill, decode] = handoff_engines(m, /*in_device_memory=*/true);
  // The decode pools start as NaN bytes: a block never copied shows.
  for (Engine* e : {prefill.get(), decode.get()}) {
    ASSERT_FALSE(e->kv_host_mirrored());
    for (const KvPoolInfo& p : e->kv_pools()) {
      ASSERT_EQ(p.transfer.base, p.cache->region().base) << "transports must see the pool itself";
      if (e == decode.get()) {
        ASSERT_EQ(cudaMemset(p.transfer.base, 0xff, p.transfer.bytes), cudaSuccess);
      }
    }
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto device_copy = [](void* dst, const void* src, std::size_t bytes) {
    BATON_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice) == cudaSuccess, "cudaMemcpy");
    BATON_CHECK(cudaDeviceSynchronize() == cudaSuccess, "cudaDeviceSynchronize");
  };
  const auto jobs = jobs_for(colocated->model_config().vocab_size);
  const auto want = testing::run_jobs(*colocated, jobs);
  const auto got = testing::run_disaggregated(*prefill, *decode, jobs, false, nullptr, device_copy);
  const std::string label = m ? m->label : "none";
  for (const Job& j : jobs) EXPECT_EQ(got.at(j.id), want.at(j.id)) << label << ", request " << j.id;
  EXPECT_EQ(decode->block_pool().num_in_use(), 0) << "blocks leaked";
}

INSTANTIATE_TEST_SUITE_P(EveryMethod, CudaHandoff, ::testing::Range(-1, static_cast<int>(method_cases().size())),
                         method_label);

class CudaGraphs : public ::testing::TestWithParam<int> {};

// Every method, greedy and seeded sampled requests: the engine replaying CUDA graphs (captured at
// start-up for every bucket, padded batches and all) gives the tokens and acceptances of the same
// engine launching every op, and really replayed.
TEST_P(CudaGraphs, ReplayedStepsGiveTheTokensOfEagerOnes) {
  SKIP_WITHOUT_GPU();
  const std::optional<MethodCase> m = method_at(GetParam());
  const std::string target = m ? m->target : "llama-f32";
  const auto spec = m ? std::optional(m->config(3)) : std::nullopt;
  auto eager = make_engine(target, kCuda, spec, NodeRole::kColocated, GraphMode::kOff);
  auto graphed = make_engine(target, kCuda, spec);  // auto: graphs on a GPU
  EXPECT_GT(graphed->graph_stats().captured, 0);
  const auto jobs = jobs_for(eager->model_config().vocab_size);
  const std::string label = m ? m->label : "none";
  const auto want = testing::run_jobs(*eager, jobs);
  const auto got = testing::run_jobs(*graphed, jobs);
  for (const Job& j : jobs) EXPECT_EQ(got.at(j.id), want.at(j.id)) << label << ", request " << j.id;
  if (m) {
    EXPECT_EQ(graphed->spec_stats()->num_accepted_tokens, eager->spec_stats()->num_accepted_tokens) << label;
  }
  EXPECT_GT(graphed->graph_stats().replays, 0) << label;
  EXPECT_EQ(eager->graph_stats().replays, 0) << label;
}

INSTANTIATE_TEST_SUITE_P(EveryMethod, CudaGraphs, ::testing::Range(-1, static_cast<int>(method_cases().size())),
                         method_label);

class CudaBf16KvCache : public ::testing::TestWithParam<int> {};

TEST_P(CudaBf16KvCache, LosslessOnTheGpuAndEqualToTheCpuAndThroughAHandoff) {
  SKIP_WITHOUT_GPU();
  const std::optional<MethodCase> m = method_at(GetParam());
  const std::string target = m ? m->target : "llama-f32";
  const std::string label = (m ? m->label : std::string("none")) + " with a BF16 KV cache";
  constexpr int k = 3;
  constexpr DType kBf16 = DType::kBF16;
  const auto spec = [&](int tokens, NodeRole role) {
    return m ? std::optional(m->config(tokens, role)) : std::nullopt;
  };
  auto plain_gpu = make_engine(target, kCuda, std::nullopt, NodeRole::kColocated, GraphMode::kAuto, kBf16);
  const auto jobs = jobs_for(plain_gpu->model_config().vocab_size);
  const auto plain = testing::run_jobs(*plain_gpu, jobs);
  auto plain_cpu = make_engine(target, kCpu, std::nullopt, NodeRole::kColocated, GraphMode::kAuto, kBf16);
  expect_same_greedy(jobs, plain, testing::run_jobs(*plain_cpu, jobs), label + ": plain cuda vs plain cpu");

  auto colocated = make_engine(target, kCuda, spec(k, NodeRole::kColocated), NodeRole::kColocated, GraphMode::kAuto,
                               kBf16);
  const auto want = testing::run_jobs(*colocated, jobs);
  expect_same_greedy(jobs, want, plain, label + ": speculative vs plain, cuda");

  auto prefill = make_engine(target, kCuda, spec(1, NodeRole::kPrefill), NodeRole::kPrefill, GraphMode::kAuto, kBf16);
  auto decode = make_engine(target, kCuda, spec(k, NodeRole::kDecode), NodeRole::kDecode, GraphMode::kAuto, kBf16);
  for (Engine* e : {prefill.get(), decode.get()}) {
    ASSERT_TRUE(e->kv_host_mirrored());
    for (const KvPoolInfo& p : e->kv_pools()) std::memset(p.transfer.base, 0xff, p.transfer.bytes);
  }
  const auto got = testing::run_disaggregated(*prefill, *decode, jobs);
  for (const Job& j : jobs) EXPECT_EQ(got.at(j.id), want.at(j.id)) << label << ", handoff, request " << j.id;
  EXPECT_EQ(decode->block_pool().num_in_use(), 0) << "blocks leaked";
}

INSTANTIATE_TEST_SUITE_P(EveryMethod, CudaBf16KvCache, ::testing::Range(-1, static_cast<int>(method_cases().size())),
                         method_label);

TEST(CudaEngine, UnknownDeviceIndexIsAClearError) {
  EngineConfig c;
  c.model_dir = fixture_path("llama-f32");
  c.backend.device = Device{DeviceType::kCuda, 99};
  auto e = Engine::create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("cuda:99"), std::string::npos) << e.status();
}

}  // namespace
}  // namespace baton
