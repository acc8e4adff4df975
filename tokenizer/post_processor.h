// Post-processors of tokenizer.json ("post_processor"): what encode(text, add_special_tokens=true)
// wraps around a single sequence. Supported: TemplateProcessing ("single" template),
// ByteLevel (ids unchanged), RobertaProcessing, BertProcessing, Sequence.
//
// Must not: handle pairs of sequences (Baton never encodes pairs) or change ids when
// add_special_tokens is false.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace baton {

class PostProcessor {
 public:
  // `prefix` / `suffix`: the ids put before / after the sequence.
  PostProcessor(std::vector<std::int32_t> prefix, std::vector<std::int32_t> suffix)
      : prefix_(std::move(prefix)), suffix_(std::move(suffix)) {}
  void apply(std::vector<std::int32_t>& ids) const {
    ids.insert(ids.begin(), prefix_.begin(), prefix_.end());
    ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  }
  const std::vector<std::int32_t>& prefix() const { return prefix_; }

 private:
  std::vector<std::int32_t> prefix_, suffix_;
};

// Every supported post-processor reduces to fixed ids before and after the sequence.
absl::StatusOr<std::unique_ptr<PostProcessor>> make_post_processor(const nlohmann::json& config,
                                                                   const std::string& where);

}  // namespace baton
