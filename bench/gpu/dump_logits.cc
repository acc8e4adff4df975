// dump_logits: one prefill forward of a model on a chosen device, writing the logits of every
// prompt position as a float32 .npy file — the engine's side of bench/gpu/compare_hf_logits.py
// (our logits against the fixture's float64 reference and against Hugging Face transformers).
//
//   dump_logits --device cpu|cuda|cuda:N --out DIR [--prompt-tokens 1,2,3] MODEL_DIR...
//
// For each MODEL_DIR: loads it the way the engine does (ModelConfig, Checkpoint, ModelWeights on
// a make_backend() backend, Transformer, a paged KvCache), runs ONE forward over the prompt with
// logits requested at every position, and writes DIR/<basename of MODEL_DIR>.npy, shape
// [positions, vocab] float32. The prompt is --prompt-tokens when given, else the model
// directory's reference.json `prompt_token_ids` (tools/fixtures). Prints one JSON line per model
// (name, device, backend, positions, vocab, file, forward_s) on stdout.
//
// Must not: compare anything (the Python side does), go through the scheduler or the sampler, or
// fall back to another device than the one asked for.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "common/logging.h"
#include "common/status.h"
#include "engine/kv/block_pool.h"
#include "engine/kv/block_table.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/state_cache.h"
#include "engine/model/transformer.h"
#include "kernels/backend_factory.h"
#include "nlohmann/json.hpp"

namespace baton::bench {
namespace {

namespace fs = std::filesystem;

int usage() {
  std::fprintf(stderr,
               "usage: dump_logits --device cpu|cuda|cuda:N --out DIR [--prompt-tokens 1,2,3] [--threads N] "
               "MODEL_DIR...\n");
  return 2;
}

absl::StatusOr<std::vector<std::int32_t>> parse_ids(const std::string& s) {
  std::vector<std::int32_t> ids;
  std::size_t pos = 0;
  while (pos <= s.size()) {
    const std::size_t comma = std::min(s.find(',', pos), s.size());
    int v = 0;
    if (!absl::SimpleAtoi(s.substr(pos, comma - pos), &v)) {
      return absl::InvalidArgumentError(str_cat("--prompt-tokens: '", s.substr(pos, comma - pos), "' is not an id"));
    }
    ids.push_back(v);
    pos = comma + 1;
  }
  return ids;
}

absl::StatusOr<std::vector<std::int32_t>> reference_prompt(const std::string& dir) {
  const std::string path = (fs::path(dir) / "reference.json").string();
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(str_cat(path, ": missing (give --prompt-tokens)"));
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("prompt_token_ids")) {
    return absl::InvalidArgumentError(str_cat(path, ": no prompt_token_ids"));
  }
  return j["prompt_token_ids"].get<std::vector<std::int32_t>>();
}

// NumPy's .npy format, version 1.0: magic, header length, a Python dict literal padded with spaces
// so that the data starts at a multiple of 64 bytes, then the little-endian float32 data.
absl::Status write_npy(const std::string& path, const std::vector<float>& data, std::int64_t rows, std::int64_t cols) {
  std::string header = str_cat("{'descr': '<f4', 'fortran_order': False, 'shape': (", rows, ", ", cols, "), }");
  const std::size_t preamble = 10;  // magic (6) + version (2) + header length (2)
  const std::size_t total = (preamble + header.size() + 1 + 63) / 64 * 64;
  header.append(total - preamble - header.size() - 1, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  if (!out) return absl::InternalError(str_cat(path, ": cannot write"));
  const char magic[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
  out.write(magic, 8);
  const auto len = static_cast<std::uint16_t>(header.size());
  const char len_bytes[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  out.write(len_bytes, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * sizeof(float)));
  return out ? absl::OkStatus() : absl::InternalError(str_cat(path, ": write failed"));
}

absl::Status dump_one(const std::string& dir, const BackendOptions& bo, const std::vector<std::int32_t>* prompt_flag,
                      const std::string& out_dir) {
  std::vector<std::int32_t> prompt;
  if (prompt_flag != nullptr) {
    prompt = *prompt_flag;
  } else {
    BATON_ASSIGN_OR_RETURN(prompt, reference_prompt(dir));
  }
  if (prompt.empty()) return absl::InvalidArgumentError(str_cat(dir, ": empty prompt"));
  const auto n = static_cast<std::int32_t>(prompt.size());

  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, make_backend(bo));
  BATON_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::load(dir));
  BATON_ASSIGN_OR_RETURN(auto ckpt, Checkpoint::open(dir));
  BATON_ASSIGN_OR_RETURN(ModelWeights weights, ModelWeights::load(config, ckpt, *backend));
  TransformerOptions to;
  to.max_num_tokens = std::max(n, 16);
  to.max_num_seqs = 1;
  to.max_num_logits = std::max(n, 16);
  to.max_model_len = std::max(n, 16);
  BATON_ASSIGN_OR_RETURN(auto model, Transformer::create(*backend, config, std::move(weights), to));
  const std::int32_t num_blocks = (n + to.block_size - 1) / to.block_size + 1;
  BATON_ASSIGN_OR_RETURN(KvCache cache, KvCache::create(*backend, model->kv_layout(), num_blocks));
  KvBlockPool pool(num_blocks, to.block_size);
  BlockTable table(to.block_size);
  BATON_CHECK(table.grow_to(pool, n), "out of blocks");

  std::vector<std::int32_t> logits_idx(static_cast<std::size_t>(n));
  for (std::int32_t i = 0; i < n; ++i) logits_idx[static_cast<std::size_t>(i)] = i;
  // A hybrid's recurrent layers read and write one state group; the prompt starts from the zero state.
  std::optional<StateCache> states;
  if (config.num_recurrent_layers() > 0) {
    BATON_ASSIGN_OR_RETURN(states, StateCache::create(*backend, model->state_layout(1), 1));
  }
  ForwardSequence seq;
  if (states) seq.state_group = 0;
  seq.tokens = prompt;
  seq.start_position = 0;
  seq.block_table = table.blocks();
  seq.logits_indices = logits_idx;
  ForwardBatch batch;
  batch.sequences.push_back(seq);

  const auto start = std::chrono::steady_clock::now();
  BATON_ASSIGN_OR_RETURN(ForwardOutput out, model->forward(batch, cache, states ? &*states : nullptr));
  const std::int64_t vocab = config.vocab_size;
  std::vector<float> logits(static_cast<std::size_t>(n * vocab));
  backend->copy_to_host(logits.data(), out.logits.data, logits.size() * sizeof(float));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const std::string name = fs::path(dir).lexically_normal().filename().empty()
                               ? fs::path(dir).lexically_normal().parent_path().filename().string()
                               : fs::path(dir).lexically_normal().filename().string();
  const std::string file = (fs::path(out_dir) / (name + ".npy")).string();
  BATON_RETURN_IF_ERROR(write_npy(file, logits, n, vocab));
  nlohmann::json j;
  j["name"] = name;
  j["model"] = dir;
  j["device"] = device_name(bo.device);
  j["backend"] = backend->describe();
  j["positions"] = n;
  j["vocab"] = vocab;
  j["file"] = file;
  j["forward_s"] = seconds;
  std::cout << j.dump() << std::endl;
  return absl::OkStatus();
}

int run(int argc, char** argv) {
  BackendOptions bo;
  std::string out_dir;
  std::optional<std::vector<std::int32_t>> prompt;
  std::vector<std::string> models;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--device" && has_value) {
      auto d = parse_device(argv[++i]);
      if (!d.ok()) return std::fprintf(stderr, "dump_logits: %s\n", std::string(d.status().message()).c_str()), 2;
      bo.device = *d;
    } else if (a == "--out" && has_value) {
      out_dir = argv[++i];
    } else if (a == "--threads" && has_value) {
      bo.num_threads = std::atoi(argv[++i]);
    } else if (a == "--prompt-tokens" && has_value) {
      auto ids = parse_ids(argv[++i]);
      if (!ids.ok()) return std::fprintf(stderr, "dump_logits: %s\n", std::string(ids.status().message()).c_str()), 2;
      prompt = std::move(*ids);
    } else if (a.starts_with("--")) {
      return usage();
    } else {
      models.push_back(a);
    }
  }
  if (out_dir.empty() || models.empty()) return usage();
  if (auto s = init_logging("warn"); !s.ok()) return 1;
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  int status = 0;
  for (const std::string& m : models) {
    if (absl::Status s = dump_one(m, bo, prompt ? &*prompt : nullptr, out_dir); !s.ok()) {
      std::fprintf(stderr, "dump_logits: %s: %s\n", m.c_str(), std::string(s.message()).c_str());
      status = 1;
    }
  }
  return status;
}

}  // namespace
}  // namespace baton::bench

int main(int argc, char** argv) { return baton::bench::run(argc, argv); }
