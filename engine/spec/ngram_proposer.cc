#include "engine/spec/ngram_proposer.h"

#include <algorithm>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "common/status.h"

namespace baton {
namespace {

// Hash and equality of the n-gram that starts at a position of a request's context. The set
// stores positions, so lookups and comparisons are by content and exact.
struct NgramHash {
  const std::vector<std::int32_t>* tokens;
  std::int32_t n;
  std::size_t operator()(std::int32_t start) const {
    const std::int32_t* t = tokens->data() + start;
    std::uint64_t h = 0x9E3779B97F4A7C15ull ^ static_cast<std::uint64_t>(n);
    for (std::int32_t i = 0; i < n; ++i) {
      h = (h ^ static_cast<std::uint32_t>(t[i])) * 0xFF51AFD7ED558CCDull;
      h ^= h >> 32;
    }
    return static_cast<std::size_t>(h);
  }
};

struct NgramEq {
  const std::vector<std::int32_t>* tokens;
  std::int32_t n;
  bool operator()(std::int32_t a, std::int32_t b) const {
    const std::int32_t* t = tokens->data();
    return std::equal(t + a, t + a + n, t + b);
  }
};

}  // namespace

// One request's context and, for each n, the earliest start of every n-gram that ends before the
// last position. Invariant: every n-gram ending at a position < indexed_end_ is in its set, and
// indexed_end_ == tokens_.size() - 1 after sync() (the suffix itself is never in the sets).
// Holds the address of tokens_ in its sets' functors, so it never moves (owned by unique_ptr).
class NgramProposer::RequestIndex {
 public:
  RequestIndex(std::int32_t min_n, std::int32_t max_n) : min_n_(min_n), max_n_(max_n) {
    sets_.reserve(static_cast<std::size_t>(max_n - min_n + 1));
    for (std::int32_t n = min_n; n <= max_n; ++n) {
      sets_.emplace_back(0, NgramHash{&tokens_, n}, NgramEq{&tokens_, n});
    }
  }
  RequestIndex(const RequestIndex&) = delete;
  RequestIndex& operator=(const RequestIndex&) = delete;

  std::size_t size() const { return tokens_.size(); }
  std::int32_t last() const { return tokens_.back(); }

  // Appends context[size(), ...) and indexes the n-grams that now end before the last position.
  void sync(std::span<const std::int32_t> context) {
    tokens_.insert(tokens_.end(), context.begin() + static_cast<std::ptrdiff_t>(tokens_.size()),
                   context.end());
    const auto end = static_cast<std::int32_t>(tokens_.size()) - 1;
    for (; indexed_end_ < end; ++indexed_end_) {
      // n-grams ending at position e = indexed_end_: start e - n + 1 >= 0.
      const std::int32_t longest = std::min(max_n_, indexed_end_ + 1);
      for (std::int32_t n = min_n_; n <= longest; ++n) {
        sets_[static_cast<std::size_t>(n - min_n_)].insert(indexed_end_ - n + 1);  // keeps the earliest
      }
    }
  }

  void propose(std::int32_t max_drafts, std::vector<std::int32_t>* drafts) const {
    const auto len = static_cast<std::int32_t>(tokens_.size());
    for (std::int32_t n = std::min(max_n_, len - 1); n >= min_n_; --n) {
      const auto& set = sets_[static_cast<std::size_t>(n - min_n_)];
      const auto it = set.find(len - n);  // compares the suffix's content with the stored n-grams
      if (it == set.end()) continue;
      const std::int32_t from = *it + n;  // <= len - 1: at least one token follows
      const std::int32_t to = std::min(len, from + max_drafts);
      drafts->assign(tokens_.begin() + from, tokens_.begin() + to);
      return;
    }
  }

 private:
  std::int32_t min_n_;
  std::int32_t max_n_;
  std::vector<std::int32_t> tokens_;
  std::int32_t indexed_end_ = 0;
  std::vector<absl::flat_hash_set<std::int32_t, NgramHash, NgramEq>> sets_;  // [n - min_n]
};

NgramProposer::NgramProposer(std::int32_t min_n, std::int32_t max_n, std::int32_t k)
    : min_n_(min_n), max_n_(max_n), k_(k) {
  BATON_CHECK(min_n >= 1 && max_n >= min_n && k >= 0, "NgramProposer(min_n=", min_n,
              ", max_n=", max_n, ", k=", k, "): need 1 <= min_n <= max_n and k >= 0");
}

NgramProposer::~NgramProposer() = default;

void NgramProposer::add_request(RequestKey key, std::span<const std::int32_t> prompt) {
  auto index = std::make_unique<RequestIndex>(min_n_, max_n_);
  index->sync(prompt);
  requests_[key] = std::move(index);
}

void NgramProposer::remove_request(RequestKey key, bool /*finished*/) { requests_.erase(key); }

absl::Status NgramProposer::propose(std::span<ProposalRequest> batch) {
  absl::Status status;
  for (ProposalRequest& req : batch) {
    BATON_CHECK(req.drafts != nullptr, "ngram propose: request ", req.key, " has no drafts vector");
    req.drafts->clear();
    if (req.draft_probs != nullptr) req.draft_probs->clear();
    const auto found = requests_.find(req.key);
    if (found == requests_.end()) {
      status.Update(absl::FailedPreconditionError(
          str_cat("ngram proposer: request ", req.key, " was never added (call add_request first)")));
      continue;
    }
    RequestIndex& index = *found->second;
    if (req.tokens.size() < index.size() ||
        (index.size() > 0 && req.tokens[index.size() - 1] != index.last())) {
      status.Update(absl::FailedPreconditionError(str_cat(
          "ngram proposer: request ", req.key, " has ", req.tokens.size(),
          " tokens, which do not extend the ", index.size(),
          " seen before (the sequence may only grow; re-add the request after a reset)")));
      continue;
    }
    index.sync(req.tokens);
    const std::int32_t max_drafts = std::min(k_, req.max_drafts);
    if (max_drafts > 0) index.propose(max_drafts, req.drafts);
  }
  return status;
}

}  // namespace baton
