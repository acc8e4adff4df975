// String -> id hash map with string_view lookups (no temporary std::string per lookup), shared by
// the BPE model and the added-token vocabulary.
//
// Must not: own anything but the map; it is filled once at load and then only read.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace baton {

struct StringViewHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

using VocabMap = std::unordered_map<std::string, std::int32_t, StringViewHash, std::equal_to<>>;

}  // namespace baton
