#include "proposer_node/context_store.h"

#include "common/status.h"

namespace baton {

absl::Status ContextStore::add(std::uint64_t id, std::span<const std::int32_t> tokens, std::int32_t prompt_len,
                               std::uint64_t key, std::optional<SidecarContext>* replaced) {
  if (prompt_len < 0 || static_cast<std::size_t>(prompt_len) > tokens.size()) {
    return absl::InvalidArgumentError(str_cat("request ", id, ": prompt_len ", prompt_len, " is outside [0, ",
                                              tokens.size(), "] (the ADD's token count)"));
  }
  std::int64_t freed = 0;
  if (auto it = contexts_.find(id); it != contexts_.end()) freed = static_cast<std::int64_t>(it->second.tokens.size());
  const std::int64_t need = num_tokens_ - freed + static_cast<std::int64_t>(tokens.size());
  if (need > max_tokens_) {
    return absl::ResourceExhaustedError(str_cat("request ", id, ": ", tokens.size(), " tokens would exceed this node's "
                                                "context budget of ", max_tokens_, " tokens on the sidecar"));
  }
  *replaced = remove(id);
  SidecarContext c;
  c.tokens.assign(tokens.begin(), tokens.end());
  c.prompt_len = prompt_len;
  c.key = key;
  num_tokens_ += static_cast<std::int64_t>(c.tokens.size());
  contexts_.emplace(id, std::move(c));
  return absl::OkStatus();
}

absl::Status ContextStore::append(std::uint64_t id, std::span<const std::int32_t> tokens) {
  SidecarContext* c = find(id);
  if (c == nullptr) return absl::NotFoundError(str_cat("request ", id, " is not known here (send an ADD first)"));
  if (num_tokens_ + static_cast<std::int64_t>(tokens.size()) > max_tokens_) {
    return absl::ResourceExhaustedError(str_cat("request ", id, ": appending ", tokens.size(), " tokens would exceed "
                                                "this node's context budget of ", max_tokens_, " tokens on the sidecar"));
  }
  c->tokens.insert(c->tokens.end(), tokens.begin(), tokens.end());
  num_tokens_ += static_cast<std::int64_t>(tokens.size());
  return absl::OkStatus();
}

std::optional<SidecarContext> ContextStore::remove(std::uint64_t id) {
  auto it = contexts_.find(id);
  if (it == contexts_.end()) return std::nullopt;
  SidecarContext c = std::move(it->second);
  contexts_.erase(it);
  num_tokens_ -= static_cast<std::int64_t>(c.tokens.size());
  return c;
}

SidecarContext* ContextStore::find(std::uint64_t id) {
  auto it = contexts_.find(id);
  return it == contexts_.end() ? nullptr : &it->second;
}

std::vector<SidecarContext> ContextStore::take_all() {
  std::vector<SidecarContext> out;
  out.reserve(contexts_.size());
  for (auto& [id, c] : contexts_) out.push_back(std::move(c));
  contexts_.clear();
  num_tokens_ = 0;
  return out;
}

}  // namespace baton
