#include "engine/spec/proposer_factory.h"

#include <filesystem>
#include <string>
#include <system_error>

#include "common/status.h"
#include "engine/spec/dflash_proposer.h"
#include "engine/spec/draft_model_proposer.h"
#include "engine/spec/head_proposer.h"
#include "engine/spec/hidden_states_extractor.h"
#include "engine/spec/medusa_proposer.h"
#include "engine/spec/ngram_proposer.h"
#include "engine/spec/suffix_proposer.h"

namespace baton {
namespace {

// speculative_config.model must be a directory; a relative path that is not one is named with the
// directory it was resolved against (a process started by `baton up` or a service manager may not
// run where the user typed the command).
absl::Status check_model_dir(const std::string& dir) {
  std::error_code ec;
  if (dir.empty() || std::filesystem::is_directory(dir, ec)) return absl::OkStatus();
  const std::filesystem::path path(dir);
  std::string where;
  if (path.is_relative()) {
    const std::filesystem::path cwd = std::filesystem::current_path(ec);
    where = ec ? std::string(" (a relative path)")
               : str_cat(" (relative to the current directory ", cwd.string(), ": ", (cwd / path).lexically_normal().string(), ")");
  }
  return absl::InvalidArgumentError(str_cat("speculative_config: `model` ", dir, where,
                                            std::filesystem::exists(path, ec) ? " is not a directory" : " does not exist"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Proposer>> make_proposer(const SpeculativeConfig& config, const ProposerContext& context) {
  if (config.num_speculative_tokens < 1 && config.method != SpecMethod::kMtp && config.method != SpecMethod::kMedusa) {
    return absl::InvalidArgumentError("speculative_config: `num_speculative_tokens` must be >= 1 to speculate");
  }
  BATON_RETURN_IF_ERROR(check_model_dir(config.model));
  switch (config.method) {
    case SpecMethod::kNgram:
      return std::unique_ptr<Proposer>(std::make_unique<NgramProposer>(
          config.prompt_lookup_min, config.prompt_lookup_max, config.num_speculative_tokens));
    case SpecMethod::kSuffix: {
      SuffixProposerConfig sc;
      sc.max_tree_depth = config.suffix_decoding_max_tree_depth;
      sc.max_cached_requests = config.suffix_decoding_max_cached_requests;
      sc.max_spec_factor = config.suffix_decoding_max_spec_factor;
      sc.min_token_prob = config.suffix_decoding_min_token_prob;
      sc.max_spec_tokens = config.num_speculative_tokens;
      return std::unique_ptr<Proposer>(std::make_unique<SuffixProposer>(sc));
    }
    case SpecMethod::kDraftModel: {
      BATON_ASSIGN_OR_RETURN(auto p, DraftModelProposer::create(config, context));
      return std::unique_ptr<Proposer>(std::move(p));
    }
    case SpecMethod::kEagle:
    case SpecMethod::kEagle3:
    case SpecMethod::kMtp: {
      BATON_ASSIGN_OR_RETURN(auto p, HeadProposer::create(config, context));
      return std::unique_ptr<Proposer>(std::move(p));
    }
    case SpecMethod::kMedusa: {
      BATON_ASSIGN_OR_RETURN(auto p, MedusaProposer::create(config, context));
      return std::unique_ptr<Proposer>(std::move(p));
    }
    case SpecMethod::kDflash: {
      BATON_ASSIGN_OR_RETURN(auto p, DFlashProposer::create(config, context));
      return std::unique_ptr<Proposer>(std::move(p));
    }
    case SpecMethod::kExtractHiddenStates: {
      BATON_ASSIGN_OR_RETURN(auto p, HiddenStatesExtractor::create(config, context));
      return std::unique_ptr<Proposer>(std::move(p));
    }
  }
  return absl::InternalError("unknown speculative method");
}

}  // namespace baton
