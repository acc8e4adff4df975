// The BPE model of tokenizer.json ("model": {"type": "BPE"}): vocab, ranked merges, unk token
// (optionally fused), byte_fallback to <0xXX> tokens, ignore_merges, continuing_subword_prefix and
// end_of_word_suffix. Tokenizes one pre-tokenized piece at a time, merging the lowest-ranked
// adjacent pair first (leftmost on ties), exactly as Hugging Face does.
//
// Thread-safety: tokenize() is const and safe from many threads; its word cache is sharded and
// locked internally. Must not: apply dropout (a file with dropout > 0 is rejected at load).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "tokenizer/vocab_map.h"

namespace baton {

class BpeModel {
 public:
  // `config` is tokenizer.json's "model" object; `where` its JSON path for errors.
  static absl::StatusOr<std::unique_ptr<BpeModel>> from_json(const nlohmann::json& config, const std::string& where);

  // Appends the ids of `word` (one pre-tokenized piece, valid UTF-8) to `out`.
  void tokenize(std::string_view word, std::vector<std::int32_t>& out) const;

  std::optional<std::int32_t> token_to_id(std::string_view token) const;
  // nullptr when no token has this id.
  const std::string* id_to_token(std::int32_t id) const;
  std::int32_t max_id() const { return static_cast<std::int32_t>(id_to_token_.size()) - 1; }
  std::int32_t size() const { return static_cast<std::int32_t>(vocab_.size()); }  // number of entries

 private:
  struct Merge {
    std::int32_t rank;
    std::int32_t new_id;
  };
  static std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }
  std::int32_t lookup(std::string_view s) const;  // -1 when absent
  void initial_symbols(std::string_view word, std::vector<std::int32_t>& symbols) const;
  void merge(std::vector<std::int32_t>& symbols) const;
  void merge_long(std::vector<std::int32_t>& symbols) const;
  static constexpr std::size_t kShortWordSymbols = 24;  // longer words use the heap

  VocabMap vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<std::int32_t> bmp_char_ids_;  // single-code-point tokens below U+10000 -> id or -1
  absl::flat_hash_map<std::uint64_t, Merge> merges_;
  std::array<std::int32_t, 256> byte_ids_{};  // <0xXX> token ids, -1 when absent
  std::optional<std::int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;

  // Word -> ids cache, as HF keeps one: most words repeat.
  static constexpr std::size_t kCacheShards = 16;
  static constexpr std::size_t kCacheShardCapacity = 4096;
  static constexpr std::size_t kMaxCachedWordBytes = 256;
  struct CacheShard {
    mutable std::shared_mutex mutex;
    std::unordered_map<std::string, std::vector<std::int32_t>, StringViewHash, std::equal_to<>> map;
  };
  mutable std::array<CacheShard, kCacheShards> cache_;
};

}  // namespace baton
