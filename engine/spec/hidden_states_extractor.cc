#include "engine/spec/hidden_states_extractor.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "common/status.h"

namespace baton {

absl::StatusOr<std::unique_ptr<HiddenStatesExtractor>> HiddenStatesExtractor::create(const SpeculativeConfig& config,
                                                                                    const ProposerContext& ctx) {
  std::unique_ptr<HiddenStatesExtractor> p(new HiddenStatesExtractor());
  p->backend_ = ctx.backend;
  p->hidden_ = ctx.target_config->hidden_size;
  const std::int32_t n_layers = ctx.target_config->num_layers;
  if (config.hidden_state_layer_ids.empty()) {
    return absl::InvalidArgumentError(
        "speculative_config: extract_hidden_states needs "
        "draft_model_config.hf_config.eagle_aux_hidden_state_layer_ids");
  }
  for (const std::int32_t id : config.hidden_state_layer_ids) {
    if (id < 0 || id >= n_layers) {
      return absl::InvalidArgumentError(str_cat("speculative_config: draft_model_config.hf_config."
                                                "eagle_aux_hidden_state_layer_ids: layer ", id, " is outside the target's ",
                                                n_layers, " layers (id i saves the input of layer i: 0..", n_layers - 1,
                                                ")"));
    }
  }
  p->layers_ = config.hidden_state_layer_ids;
  if (config.hidden_states_dir.empty()) {
    return absl::InvalidArgumentError(
        "speculative_config: extract_hidden_states needs a directory for its files: --kv-transfer-config "
        R"('{"kv_connector": "ExampleHiddenStatesConnector", "kv_role": "kv_producer", )"
        R"("kv_connector_extra_config": {"shared_storage_path": "DIR"}}')");
  }
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::absolute(config.hidden_states_dir, ec);
  if (!ec) std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    return absl::InvalidArgumentError(str_cat("--kv-transfer-config: shared_storage_path ", config.hidden_states_dir,
                                              " is not a directory that can be created",
                                              ec ? str_cat(" (", ec.message(), ")") : std::string()));
  }
  p->dir_ = dir.lexically_normal().string();
  // Fail at start-up, not at the first request, when nothing can be written there.
  const std::int32_t probe_token = 0;
  absl::StatusOr<HiddenStatesFile> probe =
      HiddenStatesFile::create(p->dir_, ".baton-write-check", std::span<const std::int32_t>(&probe_token, 1), 1, 1);
  if (!probe.ok()) {
    return absl::InvalidArgumentError(str_cat("--kv-transfer-config: shared_storage_path: ", probe.status().message()));
  }
  return p;
}

void HiddenStatesExtractor::add_request(RequestKey key, std::span<const std::int32_t> prompt) {
  State& s = states_[key];
  s.prompt.assign(prompt.begin(), prompt.end());
  s.file_name = hidden_states_file_name(str_cat("request-", key));
}

void HiddenStatesExtractor::label_request(RequestKey key, std::string_view request_id) {
  if (auto it = states_.find(key); it != states_.end()) it->second.file_name = hidden_states_file_name(request_id);
}

void HiddenStatesExtractor::remove_request(RequestKey key, bool /*finished*/) {
  states_.erase(key);  // an unfinished file is removed with it
}

absl::Status HiddenStatesExtractor::propose(std::span<ProposalRequest> /*batch*/) {
  return absl::OkStatus();  // no drafts: every step is a plain decode step
}

std::string HiddenStatesExtractor::output_file(RequestKey key) const {
  auto it = states_.find(key);
  if (it == states_.end() || !it->second.file || !it->second.file->finished()) return {};
  return it->second.file->path();
}

absl::Status HiddenStatesExtractor::observe(RequestKey key, std::int32_t start, const TargetStateRows& rows,
                                            std::int32_t n, std::int32_t n_valid) {
  auto it = states_.find(key);
  if (it == states_.end()) return absl::OkStatus();
  State& s = it->second;
  const auto prompt_len = static_cast<std::int32_t>(s.prompt.size());
  if ((s.file && s.file->finished()) || start >= prompt_len) return absl::OkStatus();
  const std::int32_t end = std::min(start + n_valid, prompt_len);
  if (start > s.written) {
    // Positions before `start` were never seen here (e.g. a hand-off's prompt, computed elsewhere):
    // this engine did not compute the prompt, so it has no file to write.
    return absl::OkStatus();
  }
  if (end <= start) return absl::OkStatus();
  bool shapes_ok = rows.tensors.size() == layers_.size() && rows.first_row >= 0 && n_valid <= n;
  for (const TensorView& t : rows.tensors) {
    shapes_ok = shapes_ok && t.dtype == DType::kF32 && t.ndim == 2 && t.dim(1) == hidden_ && t.stride(0) == hidden_ &&
                rows.first_row + n <= t.dim(0);
  }
  if (!shapes_ok) {
    return absl::InternalError(str_cat("extract_hidden_states: ", rows.tensors.size(), " target-state tensors for ",
                                       layers_.size(), " layers, from row ", rows.first_row, " for ", n,
                                       " rows of width ", hidden_));
  }
  if (!s.file) {
    BATON_ASSIGN_OR_RETURN(HiddenStatesFile f, HiddenStatesFile::create(dir_, s.file_name, s.prompt,
                                                                        static_cast<std::int32_t>(layers_.size()), hidden_));
    s.file.emplace(std::move(f));
  }
  const std::int32_t count = end - start;
  const auto h = static_cast<std::size_t>(hidden_);
  const std::size_t num_layers = layers_.size();
  layer_rows_.resize(static_cast<std::size_t>(count) * h);
  file_rows_.resize(static_cast<std::size_t>(count) * num_layers * h);
  for (std::size_t l = 0; l < num_layers; ++l) {
    const TensorView src = rows.tensors[l].slice0(rows.first_row, rows.first_row + count);
    backend_->copy_to_host(layer_rows_.data(), src.data, layer_rows_.size() * sizeof(float));
    for (std::int32_t t = 0; t < count; ++t) {
      std::copy_n(layer_rows_.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(t) * h), h,
                  file_rows_.begin() + static_cast<std::ptrdiff_t>((static_cast<std::size_t>(t) * num_layers + l) * h));
    }
  }
  BATON_RETURN_IF_ERROR(s.file->write_rows(start, count, file_rows_));
  s.written = std::max(s.written, end);
  if (s.written == prompt_len) BATON_RETURN_IF_ERROR(s.file->finish());
  return absl::OkStatus();
}

}  // namespace baton
