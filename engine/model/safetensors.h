// Reading Hugging Face safetensors checkpoints in place: a memory-mapped file (or the shards of a
// model.safetensors.index.json), every header field validated before any tensor byte is touched.
//
// Errors name the file and the tensor: a truncated file, a header length or data_offsets beyond
// the file, overlapping tensors, a byte count that disagrees with dtype x shape, an unknown dtype,
// a shard name that tries to leave the model directory. Nothing here reads out of bounds, whatever
// the file says. It knows nothing about models: weights.h maps names to model parameters.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "common/mapped_file.h"
#include "kernels/dtype.h"

namespace baton {

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  const std::uint8_t* data = nullptr;  // inside the mapping; valid while the Checkpoint lives
  std::size_t bytes = 0;
  std::string file;  // the file it came from, for messages

  std::int64_t numel() const;
  std::string shape_string() const;  // "[72, 64]"
};

class SafetensorsFile {
 public:
  static absl::StatusOr<SafetensorsFile> open(const std::string& path);

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::string& path() const { return file_.path(); }

 private:
  MappedFile file_;
  std::vector<TensorInfo> tensors_;
};

// All tensors of a model directory: model.safetensors, or the shards its index names.
class Checkpoint {
 public:
  static absl::StatusOr<std::shared_ptr<Checkpoint>> open(const std::string& model_dir);

  const TensorInfo* find(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  const std::string& model_dir() const { return model_dir_; }

 private:
  std::string model_dir_;
  std::vector<SafetensorsFile> files_;
  std::unordered_map<std::string, TensorInfo> tensors_;
};

}  // namespace baton
