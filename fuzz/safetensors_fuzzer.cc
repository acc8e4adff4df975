// Fuzzes the safetensors header parser, engine/model/safetensors.h: SafetensorsFile::open on a
// file whose bytes are the input (8-byte little-endian header length, JSON header, data section),
// as a checkpoint loader opens model.safetensors or a shard.
//
// Input: the whole file.
//
// Checks: open returns (never throws or crashes); every tensor of a file that opened lies inside
// the data section (each of its bytes can be read, and all of them span at most the data section),
// holds exactly numel x dtype size bytes, and shares no byte with another tensor.
//
// Must not: read any file but the one it writes in its own scratch directory, or skip an input by
// its content.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/safetensors.h"
#include "fuzz/fuzz_support.h"

namespace {

volatile unsigned g_sink;  // keeps the reads of tensor bytes

const baton::fuzz::ScratchDir& scratch() {
  static const baton::fuzz::ScratchDir dir;
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path =
      scratch().write("model.safetensors", std::string_view(reinterpret_cast<const char*>(data), size));
  auto file = baton::SafetensorsFile::open(path);
  if (!file.ok()) return 0;
  // The format's framing (not the parser's logic): the data section follows the header.
  FUZZ_CHECK(size >= 8);
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
  FUZZ_CHECK(header_len <= size - 8);
  const std::uint64_t data_size = size - 8 - header_len;

  std::vector<const baton::TensorInfo*> tensors;
  const std::uint8_t* lowest = nullptr;
  const std::uint8_t* highest = nullptr;
  unsigned sum = 0;
  for (const baton::TensorInfo& t : file->tensors()) {
    FUZZ_CHECK(t.bytes <= data_size);
    FUZZ_CHECK(static_cast<std::uint64_t>(t.numel()) * baton::dtype_size(t.dtype) == t.bytes);
    FUZZ_CHECK(!t.shape_string().empty());
    if (t.bytes == 0) continue;
    sum += t.data[0] + t.data[t.bytes - 1];  // inside the mapping, or this faults
    lowest = lowest == nullptr ? t.data : std::min(lowest, t.data);
    highest = highest == nullptr ? t.data + t.bytes : std::max(highest, t.data + t.bytes);
    tensors.push_back(&t);
  }
  FUZZ_CHECK(lowest == nullptr || static_cast<std::uint64_t>(highest - lowest) <= data_size);
  std::sort(tensors.begin(), tensors.end(), [](auto* a, auto* b) { return a->data < b->data; });
  for (std::size_t i = 1; i < tensors.size(); ++i) FUZZ_CHECK(tensors[i - 1]->data + tensors[i - 1]->bytes <= tensors[i]->data);
  g_sink = sum;
  return 0;
}
