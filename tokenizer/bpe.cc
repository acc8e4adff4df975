#include "tokenizer/bpe.h"

#include <climits>
#include <queue>
#include <cstdio>

#include "common/status.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/unicode.h"

namespace baton {

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::from_json(const nlohmann::json& config, const std::string& where) {
  using json_fields::get_bool_or;
  using json_fields::get_string_or;
  auto model = std::unique_ptr<BpeModel>(new BpeModel());
  if (config.contains("dropout") && !config["dropout"].is_null()) {
    if (!config["dropout"].is_number() || config["dropout"].get<double>() != 0.0) {
      return absl::UnimplementedError(str_cat(where, ".dropout: BPE dropout (", config["dropout"].dump(),
                                              ") is random at encode time and not supported; set it to null"));
    }
  }
  auto vocab_it = config.find("vocab");
  if (vocab_it == config.end() || !vocab_it->is_object()) {
    return absl::InvalidArgumentError(str_cat(where, ".vocab: expected an object of token -> id"));
  }
  std::int32_t max_id = -1;
  for (auto it = vocab_it->begin(); it != vocab_it->end(); ++it) {
    // Ids index a table: one far past any real vocabulary (the largest have ~260k tokens) would
    // make it gigabytes.
    constexpr long long kMaxId = (1 << 21) - 1;
    if (!it.value().is_number_integer() || it.value().get<long long>() < 0 || it.value().get<long long>() > kMaxId) {
      return absl::InvalidArgumentError(str_cat(where, ".vocab[\"", it.key(), "\"]: expected an id in [0, ", kMaxId,
                                                "], got ", it.value().dump()));
    }
    auto id = static_cast<std::int32_t>(it.value().get<long long>());
    model->vocab_.emplace(it.key(), id);
    max_id = std::max(max_id, id);
  }
  model->id_to_token_.resize(static_cast<std::size_t>(max_id) + 1);
  std::vector<bool> has_token(model->id_to_token_.size(), false);
  for (const auto& [token, id] : model->vocab_) {
    model->id_to_token_[id] = token;
    has_token[id] = true;
  }

  BATON_ASSIGN_OR_RETURN(model->continuing_subword_prefix_, get_string_or(config, where, "continuing_subword_prefix", ""));
  BATON_ASSIGN_OR_RETURN(model->end_of_word_suffix_, get_string_or(config, where, "end_of_word_suffix", ""));
  BATON_ASSIGN_OR_RETURN(model->fuse_unk_, get_bool_or(config, where, "fuse_unk", false));
  BATON_ASSIGN_OR_RETURN(model->byte_fallback_, get_bool_or(config, where, "byte_fallback", false));
  BATON_ASSIGN_OR_RETURN(model->ignore_merges_, get_bool_or(config, where, "ignore_merges", false));
  BATON_ASSIGN_OR_RETURN(std::string unk, get_string_or(config, where, "unk_token", ""));
  if (!unk.empty()) {
    std::int32_t id = model->lookup(unk);
    if (id < 0) {
      return absl::InvalidArgumentError(str_cat(where, ".unk_token: \"", unk, "\" is not in the vocab"));
    }
    model->unk_id_ = id;
  }

  model->bmp_char_ids_.assign(0x10000, -1);
  for (const auto& [token, id] : model->vocab_) {
    std::size_t pos = 0;
    if (token.empty()) continue;
    char32_t cp = unicode::next_code_point(token, pos);
    if (pos == token.size() && cp < 0x10000) model->bmp_char_ids_[cp] = id;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    model->byte_ids_[b] = model->lookup(name);
  }

  auto merges_it = config.find("merges");
  if (merges_it == config.end() || !merges_it->is_array()) {
    return absl::InvalidArgumentError(str_cat(where, ".merges: expected an array"));
  }
  const std::size_t prefix_len = model->continuing_subword_prefix_.size();
  for (std::size_t rank = 0; rank < merges_it->size(); ++rank) {
    const auto& entry = (*merges_it)[rank];
    std::string a, b;
    if (entry.is_string()) {
      const auto& s = entry.get_ref<const std::string&>();
      std::size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return absl::InvalidArgumentError(str_cat(where, ".merges[", rank, "]: \"", s,
                                                  "\" is not two tokens separated by one space"));
      }
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string()) {
      a = entry[0].get<std::string>();
      b = entry[1].get<std::string>();
    } else {
      return absl::InvalidArgumentError(str_cat(where, ".merges[", rank, "]: expected \"a b\" or [\"a\", \"b\"], got ",
                                                entry.dump()));
    }
    std::string merged = a + (prefix_len > 0 && b.compare(0, prefix_len, model->continuing_subword_prefix_) == 0
                                  ? b.substr(prefix_len)
                                  : b);
    std::int32_t a_id = model->lookup(a), b_id = model->lookup(b), new_id = model->lookup(merged);
    if (a_id < 0 || b_id < 0 || new_id < 0) {
      return absl::InvalidArgumentError(str_cat(where, ".merges[", rank, "]: \"", a_id < 0 ? a : b_id < 0 ? b : merged,
                                                "\" is not in the vocab"));
    }
    // A repeated pair keeps its last rank, as in Hugging Face's map construction.
    model->merges_.insert_or_assign(pair_key(a_id, b_id), Merge{static_cast<std::int32_t>(rank), new_id});
  }
  return model;
}

std::int32_t BpeModel::lookup(std::string_view s) const {
  auto it = vocab_.find(s);
  return it == vocab_.end() ? -1 : it->second;
}

std::optional<std::int32_t> BpeModel::token_to_id(std::string_view token) const {
  std::int32_t id = lookup(token);
  if (id < 0) return std::nullopt;
  return id;
}

const std::string* BpeModel::id_to_token(std::int32_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= id_to_token_.size()) return nullptr;
  const std::string& token = id_to_token_[id];
  if (token.empty() && lookup(token) != id) return nullptr;
  return &token;
}

void BpeModel::initial_symbols(std::string_view word, std::vector<std::int32_t>& symbols) const {
  const bool plain = continuing_subword_prefix_.empty() && end_of_word_suffix_.empty();
  std::int32_t pending_unk = -1;  // an unk waiting to be emitted (maybe fused further), or -1
  std::string decorated;
  std::size_t pos = 0;
  while (pos < word.size()) {
    std::size_t start = pos;
    char32_t cp = unicode::next_code_point(word, pos);
    std::string_view piece = word.substr(start, pos - start);
    std::int32_t id;
    if (plain) {
      id = cp < 0x10000 ? bmp_char_ids_[cp] : lookup(piece);
    } else {
      decorated.clear();
      if (start != 0) decorated.append(continuing_subword_prefix_);
      decorated.append(piece);
      if (pos == word.size()) decorated.append(end_of_word_suffix_);
      piece = decorated;
      id = lookup(piece);
    }
    if (id >= 0) {
      if (pending_unk >= 0) {
        symbols.push_back(pending_unk);
        pending_unk = -1;
      }
      symbols.push_back(id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : piece) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        // Hugging Face emits these before any pending unk; so do we.
        for (char c : piece) symbols.push_back(byte_ids_[static_cast<unsigned char>(c)]);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk >= 0 && !fuse_unk_) symbols.push_back(pending_unk);
      pending_unk = *unk_id_;
    }
  }
  if (pending_unk >= 0) symbols.push_back(pending_unk);
}

void BpeModel::merge(std::vector<std::int32_t>& symbols) const {
  if (symbols.size() < 2) return;
  if (symbols.size() > kShortWordSymbols) {
    merge_long(symbols);
    return;
  }
  // ranks[i] / ids[i]: the merge of symbols[i] and symbols[i + 1], rank INT_MAX when none.
  std::vector<Merge> pairs(symbols.size() - 1);
  auto pair_at = [&](std::size_t i) {
    auto it = merges_.find(pair_key(symbols[i], symbols[i + 1]));
    return it == merges_.end() ? Merge{INT_MAX, -1} : it->second;
  };
  for (std::size_t i = 0; i + 1 < symbols.size(); ++i) pairs[i] = pair_at(i);
  while (!pairs.empty()) {
    std::size_t best = 0;
    for (std::size_t i = 1; i < pairs.size(); ++i) {
      if (pairs[i].rank < pairs[best].rank) best = i;
    }
    if (pairs[best].rank == INT_MAX) break;
    symbols[best] = pairs[best].new_id;
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    pairs.erase(pairs.begin() + static_cast<std::ptrdiff_t>(best));
    if (best > 0) pairs[best - 1] = pair_at(best - 1);
    if (best < pairs.size()) pairs[best] = pair_at(best);
  }
}

// Long words (SentencePiece-style models see whole sentences as one word): the same merge order
// with a heap over a linked list of symbols, O(n log n) instead of O(n^2).
void BpeModel::merge_long(std::vector<std::int32_t>& symbols) const {
  struct Candidate {
    std::int32_t rank;
    std::int32_t pos;  // index of the left symbol (stable: a merged symbol keeps its left index)
    std::int32_t new_id;
    bool operator<(const Candidate& o) const {  // std::priority_queue pops the largest
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  const auto n = static_cast<std::int32_t>(symbols.size());
  std::vector<std::int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (std::int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  std::vector<Candidate> storage;
  storage.reserve(static_cast<std::size_t>(n));
  std::priority_queue<Candidate> queue(std::less<Candidate>(), std::move(storage));
  auto push = [&](std::int32_t left) {
    std::int32_t right = next[left];
    if (right < 0) return;
    auto it = merges_.find(pair_key(symbols[left], symbols[right]));
    if (it != merges_.end()) queue.push({it->second.rank, left, it->second.new_id});
  };
  for (std::int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!queue.empty()) {
    Candidate top = queue.top();
    queue.pop();
    std::int32_t left = top.pos;
    if (!alive[left] || next[left] < 0) continue;
    std::int32_t right = next[left];
    auto it = merges_.find(pair_key(symbols[left], symbols[right]));
    if (it == merges_.end() || it->second.new_id != top.new_id || it->second.rank != top.rank) continue;  // stale
    symbols[left] = top.new_id;
    alive[right] = false;
    next[left] = next[right];
    if (next[right] >= 0) prev[next[right]] = left;
    if (prev[left] >= 0) push(prev[left]);
    push(left);
  }
  std::size_t out = 0;
  for (std::int32_t i = 0; i < n; ++i) {
    if (alive[i]) symbols[out++] = symbols[i];
  }
  symbols.resize(out);
}

void BpeModel::tokenize(std::string_view word, std::vector<std::int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    std::int32_t id = lookup(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  CacheShard& shard = cache_[StringViewHash{}(word) % kCacheShards];
  if (cacheable) {
    std::shared_lock lock(shard.mutex);
    auto it = shard.map.find(word);
    if (it != shard.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  thread_local std::vector<std::int32_t> symbols;
  symbols.clear();
  initial_symbols(word, symbols);
  merge(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
  if (cacheable) {
    std::unique_lock lock(shard.mutex);
    if (shard.map.size() >= kCacheShardCapacity) shard.map.clear();
    shard.map.emplace(std::string(word), symbols);
  }
}

}  // namespace baton
