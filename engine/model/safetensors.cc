#include "engine/model/safetensors.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "common/status.h"
#include "common/text_file.h"
#include "nlohmann/json.hpp"

namespace baton {
namespace {

using nlohmann::json;

// Real headers are a few hundred KB at most; anything bigger is a corrupt length field.
constexpr std::uint64_t kMaxHeaderBytes = 100ULL << 20;

absl::Status bad(const std::string& path, const std::string& what) {
  return absl::DataLossError(str_cat(path, ": ", what));
}

}  // namespace

std::int64_t TensorInfo::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += str_cat(i ? ", " : "", shape[i]);
  return s + "]";
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  BATON_ASSIGN_OR_RETURN(f.file_, MappedFile::open(path));
  const std::size_t size = f.file_.size();
  if (size < 8) return bad(path, str_cat("truncated: ", size, " bytes, too short for the 8-byte header length"));
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | f.file_.data()[i];
  if (header_len > size - 8) {
    return bad(path, str_cat("header length ", header_len, " exceeds the ", size - 8,
                             " bytes after the length field (file truncated or not safetensors)"));
  }
  if (header_len > kMaxHeaderBytes) return bad(path, str_cat("header length ", header_len, " is implausibly large"));
  const char* header_begin = reinterpret_cast<const char*>(f.file_.data() + 8);
  const json header = json::parse(header_begin, header_begin + header_len, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return bad(path, "header is not a JSON object");
  const std::uint8_t* data = f.file_.data() + 8 + header_len;
  const std::uint64_t data_size = size - 8 - header_len;

  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string where = str_cat("tensor `", name, "`");
    if (!entry.is_object()) return bad(path, str_cat(where, ": header entry is not an object"));
    TensorInfo t;
    t.name = name;
    t.file = path;
    const auto dt = entry.find("dtype");
    if (dt == entry.end() || !dt->is_string()) return bad(path, str_cat(where, ": no dtype"));
    const auto dtype = dtype_from_safetensors(dt->get<std::string>());
    if (!dtype) return bad(path, str_cat(where, ": unsupported dtype ", dt->dump()));
    t.dtype = *dtype;
    const auto sh = entry.find("shape");
    if (sh == entry.end() || !sh->is_array()) return bad(path, str_cat(where, ": no shape"));
    std::uint64_t numel = 1;
    for (const json& d : *sh) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<std::int64_t>() >= 0)) {
        return bad(path, str_cat(where, ": shape ", sh->dump(), " has a non-integer or negative dimension"));
      }
      const auto dim = d.get<std::uint64_t>();
      if (dim != 0 && numel > (UINT64_MAX / 16) / dim) return bad(path, str_cat(where, ": shape ", sh->dump(), " overflows"));
      numel *= dim;
      t.shape.push_back(static_cast<std::int64_t>(dim));
    }
    const auto off = entry.find("data_offsets");
    if (off == entry.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned()) {
      return bad(path, str_cat(where, ": data_offsets must be two non-negative integers"));
    }
    const auto begin = (*off)[0].get<std::uint64_t>(), end = (*off)[1].get<std::uint64_t>();
    if (begin > end) return bad(path, str_cat(where, ": data_offsets [", begin, ", ", end, "] are reversed"));
    if (end > data_size) {
      return bad(path, str_cat(where, ": data_offsets end ", end, " lies beyond the ", data_size,
                               "-byte data section (file truncated, or the header lies)"));
    }
    const std::uint64_t expected = numel * dtype_size(t.dtype);
    if (end - begin != expected) {
      return bad(path, str_cat(where, ": data_offsets [", begin, ", ", end, "] hold ", end - begin, " bytes but ",
                               dtype_name(t.dtype), " ", t.shape_string(), " needs ", expected));
    }
    t.data = data + begin;
    t.bytes = static_cast<std::size_t>(expected);
    f.tensors_.push_back(std::move(t));
  }
  // No two tensors may share bytes.
  std::vector<const TensorInfo*> by_offset;
  for (const auto& t : f.tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->data < b->data; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->data < by_offset[i - 1]->data + by_offset[i - 1]->bytes) {
      return bad(path, str_cat("tensors `", by_offset[i - 1]->name, "` and `", by_offset[i]->name, "` overlap"));
    }
  }
  return f;
}

absl::StatusOr<std::shared_ptr<Checkpoint>> Checkpoint::open(const std::string& model_dir) {
  namespace fs = std::filesystem;
  auto ckpt = std::shared_ptr<Checkpoint>(new Checkpoint());
  ckpt->model_dir_ = model_dir;
  const fs::path single = fs::path(model_dir) / "model.safetensors";
  const fs::path index = fs::path(model_dir) / "model.safetensors.index.json";
  std::vector<std::string> shard_names;
  json weight_map;
  if (fs::exists(single)) {
    shard_names.push_back("model.safetensors");
  } else if (fs::exists(index)) {
    BATON_ASSIGN_OR_RETURN(const std::string text, read_text_file(index.string()));
    const json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
      return absl::InvalidArgumentError(str_cat(index.string(), ": expected a JSON object with a `weight_map` object"));
    }
    weight_map = j["weight_map"];
    std::set<std::string> unique;
    for (const auto& [name, file] : weight_map.items()) {
      if (!file.is_string()) {
        return absl::InvalidArgumentError(str_cat(index.string(), ": weight_map[\"", name, "\"] is not a file name"));
      }
      const std::string f = file.get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f.find('\\') != std::string::npos || f == "." || f == "..") {
        return absl::InvalidArgumentError(
            str_cat(index.string(), ": weight_map[\"", name, "\"] = \"", f, "\" is not a plain file name in the model directory"));
      }
      unique.insert(f);
    }
    shard_names.assign(unique.begin(), unique.end());
  } else {
    return absl::NotFoundError(str_cat(model_dir, ": no model.safetensors or model.safetensors.index.json"));
  }
  for (const std::string& shard : shard_names) {
    BATON_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open((fs::path(model_dir) / shard).string()));
    for (const TensorInfo& t : file.tensors()) {
      if (auto [it, inserted] = ckpt->tensors_.emplace(t.name, t); !inserted) {
        return absl::InvalidArgumentError(
            str_cat("tensor `", t.name, "` appears in both ", it->second.file, " and ", t.file));
      }
    }
    ckpt->files_.push_back(std::move(file));
  }
  for (const auto& [name, file] : weight_map.items()) {
    auto it = ckpt->tensors_.find(name);
    if (it == ckpt->tensors_.end() || fs::path(it->second.file).filename() != file.get<std::string>()) {
      return absl::InvalidArgumentError(str_cat(index.string(), " maps tensor `", name, "` to ", file.get<std::string>(),
                                                ", which does not contain it"));
    }
  }
  return ckpt;
}

const TensorInfo* Checkpoint::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace baton
