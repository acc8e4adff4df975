// HiddenStatesFile: one request's safetensors file of extract_hidden_states, written as its rows
// arrive. vLLM's layout (its hidden-states connectors write the same two tensors):
//
//   token_ids      I64 [num_tokens]                         the prompt
//   hidden_states  F32 [num_tokens, num_layers, hidden]      row [t, l] = the residual stream entering
//                                                            layer layer_ids[l] at position t
//
// The file is created as a hidden temporary beside its final name, rows are written in place (no
// copy of the whole prompt's states is held in memory), and finish() renames it: a reader that sees
// the final name sees a complete file. A file never finished (the request was aborted or failed) is
// removed by the destructor.
//
// Must not: decide which rows are valid (the proposer does), or write outside its directory (the
// name comes from hidden_states_file_name(), which maps any request id to one plain file name).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace baton {

// A file name for a request id: the id's characters outside [A-Za-z0-9._~-] become '_', a leading
// '.' too, and an id that needed changes or is long gets a hash of the whole id appended, so that
// distinct ids keep distinct names. Ends in ".safetensors".
std::string hidden_states_file_name(std::string_view request_id);

class HiddenStatesFile {
 public:
  // Creates the temporary file in `dir` (which must exist) with the header and token ids written.
  static absl::StatusOr<HiddenStatesFile> create(const std::string& dir, const std::string& file_name,
                                                 std::span<const std::int32_t> token_ids, std::int32_t num_layers,
                                                 std::int32_t hidden);
  HiddenStatesFile(HiddenStatesFile&& other) noexcept;
  HiddenStatesFile& operator=(HiddenStatesFile&& other) noexcept;
  HiddenStatesFile(const HiddenStatesFile&) = delete;
  HiddenStatesFile& operator=(const HiddenStatesFile&) = delete;
  ~HiddenStatesFile();

  // rows: [count, num_layers, hidden] F32 for positions [first, first + count) of the prompt.
  absl::Status write_rows(std::int32_t first, std::int32_t count, std::span<const float> rows);
  // Renames the file to its final name (replacing an older file of that name).
  absl::Status finish();

  const std::string& path() const { return path_; }  // the final name
  bool finished() const { return finished_; }

 private:
  HiddenStatesFile() = default;
  void discard();

  int fd_ = -1;
  std::string path_;
  std::string temp_path_;  // empty once renamed (or discarded)
  std::int64_t data_start_ = 0;  // file offset of hidden_states' first byte
  std::int32_t num_tokens_ = 0;
  std::int64_t row_floats_ = 0;  // num_layers * hidden
  bool finished_ = false;
};

}  // namespace baton
