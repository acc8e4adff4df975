// speculative_config parsing: vLLM's keys and defaults, errors that name the key, and the P/D rule
// for each node role.
#include "common/pd_rule.h"
#include "engine/spec/config.h"

#include "engine/spec/rejection_sampler_config.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace baton {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<SpeculativeConfig> parse(const std::string& json, NodeRole role = NodeRole::kColocated,
                                        bool recurrent = false) {
  return SpeculativeConfig::parse(json, role, recurrent);
}

TEST(SpeculativeConfig, DefaultsFollowVllm) {
  auto c = parse(R"({"method": "ngram", "num_speculative_tokens": 4})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->prompt_lookup_min, 5);
  EXPECT_EQ(c->prompt_lookup_max, 5);
  EXPECT_EQ(c->rejection_sample_method, RejectionMethod::kStandard);
  EXPECT_EQ(c->draft_sample_method, DraftSampleMethod::kGreedy);
  auto s = parse(R"({"method": "suffix"})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->num_speculative_tokens, 24);  // the tree depth
  EXPECT_EQ(s->suffix_decoding_max_cached_requests, 10000);
  EXPECT_FLOAT_EQ(s->suffix_decoding_min_token_prob, 0.1f);
  auto m = parse(R"({"method": "mtp"})");
  ASSERT_TRUE(m.ok()) << m.status();  // k defaults to the model's MTP layers, resolved at load
  auto medusa = parse(R"({"method": "medusa", "model": "heads"})");
  ASSERT_TRUE(medusa.ok()) << medusa.status();  // k defaults to the checkpoint's heads, resolved at load
  EXPECT_EQ(medusa->method, SpecMethod::kMedusa);
  EXPECT_EQ(medusa->to_json()["method"], "medusa");
  auto dflash = parse(R"({"method": "dflash", "model": "drafter", "num_speculative_tokens": 7})");
  ASSERT_TRUE(dflash.ok()) << dflash.status();
  EXPECT_EQ(dflash->method, SpecMethod::kDflash);
  EXPECT_EQ(dflash->to_json()["method"], "dflash");
}

TEST(SpeculativeConfig, PromptLookupBoundsCopyAndCheck) {
  auto only_min = parse(R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2})");
  ASSERT_TRUE(only_min.ok());
  EXPECT_EQ(only_min->prompt_lookup_max, 2);
  auto only_max = parse(R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 7})");
  ASSERT_TRUE(only_max.ok());
  EXPECT_EQ(only_max->prompt_lookup_min, 7);
  auto bad = parse(R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 4, "prompt_lookup_max": 2})");
  EXPECT_THAT(bad.status().message(), HasSubstr("prompt_lookup_min"));
}

TEST(SpeculativeConfig, ErrorsNameTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"num_speculative_tokens": 3})", "`method` is required"},
      {R"({"method": "lookahead", "num_speculative_tokens": 3})", "`method`"},
      {R"({"method": "medusa", "num_speculative_tokens": 3})", "`model` is required for method medusa"},
      {R"({"method": "dflash", "num_speculative_tokens": 3})", "`model` is required for method dflash"},
      {R"({"method": "dflash", "model": "d"})", "`num_speculative_tokens` is required for method dflash"},
      {R"({"method": "eagle3", "num_speculative_tokens": 3})", "`model` is required"},
      {R"({"method": "draft_model", "num_speculative_tokens": 3})", "`model` is required"},
      {R"({"method": "ngram"})", "`num_speculative_tokens` is required"},
      {R"({"method": "ngram", "num_speculative_tokens": -1})", "`num_speculative_tokens`"},
      {R"({"method": "ngram", "num_speculative_tokens": 2, "spec_tokens": 2})", "`spec_tokens` is not a known key"},
      {R"({"method": "ngram", "num_speculative_tokens": 2, "rejection_sample_method": "fast"})", "`rejection_sample_method`"},
      {R"({"method": "ngram", "num_speculative_tokens": 2, "draft_sample_method": "probabilistic"})", "`draft_sample_method`"},
      {R"({"method": "suffix", "suffix_decoding_min_token_prob": 1.5})", "`suffix_decoding_min_token_prob`"},
      {R"({"method": "eagle", "num_speculative_tokens": 2, "model": "x", "draft_tensor_parallel_size": 2})",
       "`draft_tensor_parallel_size`"},
      {R"({"method": "ngram", "num_speculative_tokens": 2, "disable_by_batch_size": 1})", "`disable_by_batch_size`"},
      {R"({"method": "ngram", "num_speculative_tokens": 2, "disable_by_batch_size": "8"})", "`disable_by_batch_size`"},
      {"[1, 2]", "expected a JSON object"},
      {"{not json", "expected a JSON object"},
  };
  for (const auto& [json, expected] : cases) {
    auto c = parse(json);
    EXPECT_FALSE(c.ok()) << json;
    EXPECT_THAT(c.status().message(), HasSubstr(expected)) << json;
  }
}

TEST(SpeculativeConfig, ProposerEndpointOnlyWithModelFreeMethods) {
  auto c = parse(R"({"method": "suffix", "num_speculative_tokens": 4, "proposer_endpoint": "10.0.0.7:50070",
                     "proposer_budget_ms": 2.5})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->proposer_endpoint, "10.0.0.7:50070");
  EXPECT_DOUBLE_EQ(c->proposer_budget_ms, 2.5);
  // It travels in the resolved JSON (the hello to the sidecar, NodeInfo) and parses back.
  auto again = SpeculativeConfig::from_json(c->to_json(), NodeRole::kDecode);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->proposer_endpoint, "10.0.0.7:50070");
  auto ngram = parse(R"({"method": "ngram", "num_speculative_tokens": 3, "proposer_endpoint": "h:1"})");
  ASSERT_TRUE(ngram.ok()) << ngram.status();
  EXPECT_DOUBLE_EQ(ngram->proposer_budget_ms, 5.0);
  EXPECT_FALSE(parse(R"({"method": "ngram", "num_speculative_tokens": 3})")->to_json().contains("proposer_endpoint"));

  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"method": "eagle3", "model": "x", "num_speculative_tokens": 3, "proposer_endpoint": "h:1"})",
       "`proposer_endpoint` works with method ngram or suffix only"},
      {R"({"method": "ngram", "num_speculative_tokens": 3, "proposer_endpoint": "nohost"})", "HOST:PORT"},
      {R"({"method": "ngram", "num_speculative_tokens": 3, "proposer_endpoint": 5})", "HOST:PORT"},
      {R"({"method": "ngram", "num_speculative_tokens": 3, "proposer_endpoint": "h:1", "proposer_budget_ms": 0})",
       "`proposer_budget_ms`"},
      {R"({"method": "ngram", "num_speculative_tokens": 3, "proposer_budget_ms": 3})", "needs proposer_endpoint"},
  };
  for (const auto& [json, expected] : bad) {
    auto r = parse(json);
    EXPECT_FALSE(r.ok()) << json;
    EXPECT_THAT(r.status().message(), HasSubstr(expected)) << json;
  }
}

TEST(SpeculativeConfig, DisableByBatchSizeIsOffUnlessSetAndRoundTrips) {
  auto unset = parse(R"({"method": "ngram", "num_speculative_tokens": 4, "disable_by_batch_size": null})");
  ASSERT_TRUE(unset.ok()) << unset.status();
  EXPECT_EQ(unset->disable_by_batch_size, 0);
  EXPECT_FALSE(unset->to_json().contains("disable_by_batch_size"));
  auto c = parse(R"({"method": "ngram", "num_speculative_tokens": 4, "disable_by_batch_size": 8})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->disable_by_batch_size, 8);
  auto again = SpeculativeConfig::from_json(c->to_json(), NodeRole::kColocated);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->disable_by_batch_size, 8);
}

TEST(SpeculativeConfig, AdaptiveDraftLengthIsOffUnlessSetAndRoundTrips) {
  auto unset = parse(R"({"method": "eagle3", "model": "h", "num_speculative_tokens": 4})");
  ASSERT_TRUE(unset.ok()) << unset.status();
  EXPECT_FALSE(unset->adaptive_draft_length);
  EXPECT_FALSE(unset->to_json().contains("adaptive_draft_length"));
  auto c = parse(R"({"method": "eagle3", "model": "h", "num_speculative_tokens": 4, "adaptive_draft_length": true})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->adaptive_draft_length);
  auto again = SpeculativeConfig::from_json(c->to_json(), NodeRole::kDecode);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->adaptive_draft_length);
  for (const char* bad : {R"("yes")", "1", "[]"}) {
    auto r = parse(std::string(R"({"method": "ngram", "num_speculative_tokens": 4, "adaptive_draft_length": )") + bad + "}");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("adaptive_draft_length")) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("true or false")) << bad;
  }
}

TEST(SpeculativeConfig, BlockAndProbabilisticParse) {
  auto c = parse(R"({"method": "draft_model", "model": "d", "num_speculative_tokens": 3,
                     "rejection_sample_method": "block", "draft_sample_method": "probabilistic"})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rejection_sample_method, RejectionMethod::kBlock);
  EXPECT_EQ(c->draft_sample_method, DraftSampleMethod::kProbabilistic);
  // Round trip through to_json.
  auto again = SpeculativeConfig::from_json(c->to_json(), NodeRole::kColocated);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->to_json(), c->to_json());
}

// vLLM Ascend's rejection_sampler_config: as a key of the speculative config, and through
// --additional-config. Entropy verification is the one lossy setting and shows in the config.
TEST(SpeculativeConfig, RejectionSamplerConfigParsesChecksAndRoundTrips) {
  auto c = parse(R"({"method": "ngram", "num_speculative_tokens": 4, "rejection_sampler_config":
                     {"enable_block_verify": true, "enable_entropy_verify": true, "posterior_alpha": 1}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rejection_sample_method, RejectionMethod::kBlock);
  EXPECT_TRUE(c->entropy_verification.enabled);
  EXPECT_DOUBLE_EQ(c->entropy_verification.posterior_threshold, 0.95);  // vLLM Ascend's default
  EXPECT_DOUBLE_EQ(c->entropy_verification.posterior_alpha, 1.0);
  EXPECT_FALSE(c->lossless());
  EXPECT_EQ(c->verification_name(), "block+entropy");
  auto again = SpeculativeConfig::from_json(c->to_json(), NodeRole::kColocated);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->entropy_verification.enabled);
  EXPECT_DOUBLE_EQ(again->entropy_verification.posterior_alpha, 1.0);
  EXPECT_EQ(again->rejection_sample_method, RejectionMethod::kBlock);

  auto off = parse(R"({"method": "ngram", "num_speculative_tokens": 4, "rejection_sampler_config": {}})");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_TRUE(off->lossless());
  EXPECT_EQ(off->verification_name(), "standard");
  EXPECT_FALSE(off->to_json().contains("rejection_sampler_config"));

  for (const auto& [json, key] : std::vector<std::pair<std::string, std::string>>{
           {R"({"posterior_threshold": 0})", "posterior_threshold"},
           {R"({"posterior_threshold": 1.5})", "posterior_threshold"},
           {R"({"posterior_alpha": -0.1})", "posterior_alpha"},
           {R"({"enable_entropy_verify": "yes"})", "enable_entropy_verify"},
           {R"({"entropy": true})", "entropy"}}) {
    auto bad = parse(R"({"method": "ngram", "num_speculative_tokens": 4, "rejection_sampler_config": )" + json + "}");
    ASSERT_FALSE(bad.ok()) << json;
    EXPECT_THAT(std::string(bad.status().message()), HasSubstr("rejection_sampler_config." + key)) << json;
  }
  auto contradiction = parse(R"({"method": "ngram", "num_speculative_tokens": 4, "rejection_sample_method": "standard",
                                 "rejection_sampler_config": {"enable_block_verify": true}})");
  ASSERT_FALSE(contradiction.ok());
  EXPECT_THAT(std::string(contradiction.status().message()), HasSubstr("contradicts rejection_sample_method"));
}

TEST(SpeculativeConfig, AdditionalConfigMergesItsRejectionSamplerConfig) {
  nlohmann::json spec = {{"method", "ngram"}, {"num_speculative_tokens", 4}};
  ASSERT_TRUE(merge_additional_config(R"({"rejection_sampler_config": {"enable_entropy_verify": true}})", &spec).ok());
  auto c = SpeculativeConfig::from_json(spec, NodeRole::kDecode);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->lossless());
  // The same value in both places is fine; different values, other keys, no speculation, or
  // something that is not an object are errors that say so.
  EXPECT_TRUE(merge_additional_config(R"({"rejection_sampler_config": {"enable_entropy_verify": true}})", &spec).ok());
  const auto message = [](const absl::Status& s) { return std::string(s.message()); };
  EXPECT_THAT(message(merge_additional_config(R"({"rejection_sampler_config": {"enable_entropy_verify": false}})", &spec)),
              HasSubstr("contradicts"));
  EXPECT_THAT(message(merge_additional_config(R"({"enable_kv_nz": false})", &spec)), HasSubstr("`enable_kv_nz`"));
  EXPECT_THAT(message(merge_additional_config(R"({"rejection_sampler_config": {}})", nullptr)),
              HasSubstr("needs --speculative-config"));
  EXPECT_THAT(message(merge_additional_config("[1]", &spec)), HasSubstr("expected a JSON object"));
  EXPECT_TRUE(merge_additional_config("{}", nullptr).ok());
}

TEST(PdRule, EachRoleIsChecked) {
  EXPECT_TRUE(parse(R"({"method": "eagle3", "model": "m", "num_speculative_tokens": 1})", NodeRole::kPrefill).ok());
  auto p = parse(R"({"method": "eagle3", "model": "m", "num_speculative_tokens": 3})", NodeRole::kPrefill);
  EXPECT_THAT(p.status().message(), HasSubstr("prefill node"));
  EXPECT_THAT(p.status().message(), HasSubstr("requires 1"));
  auto d = parse(R"({"method": "eagle3", "model": "m", "num_speculative_tokens": 0})", NodeRole::kDecode);
  EXPECT_THAT(d.status().message(), HasSubstr("k >= 1"));
  EXPECT_TRUE(parse(R"({"method": "eagle3", "model": "m", "num_speculative_tokens": 5})", NodeRole::kDecode).ok());
  // Recurrent models: prefill may run the decode nodes' k.
  EXPECT_TRUE(parse(R"({"method": "mtp", "num_speculative_tokens": 3})", NodeRole::kPrefill, true).ok());
}

TEST(PdRule, ValidateForRoleNamesTheValueTheModelKindAndTheRule) {
  auto mtp = parse(R"({"method": "mtp"})", NodeRole::kPrefill);  // k unset: the engine resolves it
  ASSERT_TRUE(mtp.ok()) << mtp.status();
  EXPECT_EQ(mtp->num_speculative_tokens, -1);
  mtp->num_speculative_tokens = 2;  // as resolved for a 2-layer MTP head
  const absl::Status p = validate_for_role(*mtp, NodeRole::kPrefill, false);
  EXPECT_THAT(p.message(), HasSubstr("is 2 on a prefill node serving an attention-only model"));
  EXPECT_THAT(p.message(), HasSubstr("P/D rule requires 1"));
  EXPECT_THAT(p.message(), HasSubstr("one per MTP layer"));
  EXPECT_TRUE(validate_for_role(*mtp, NodeRole::kPrefill, /*recurrent=*/true).ok());
  EXPECT_TRUE(validate_for_role(*mtp, NodeRole::kDecode, false).ok());
  mtp->num_speculative_tokens = 0;
  EXPECT_THAT(validate_for_role(*mtp, NodeRole::kDecode, true).message(),
              HasSubstr("decode node serving a hybrid model with recurrent layers"));
  EXPECT_TRUE(validate_for_role(std::nullopt, NodeRole::kPrefill, false).ok());
  // Medusa's k defaults to its heads: a prefill node must set 1.
  auto medusa = parse(R"({"method": "medusa", "model": "m"})", NodeRole::kPrefill);
  ASSERT_TRUE(medusa.ok()) << medusa.status();
  medusa->num_speculative_tokens = 4;  // as resolved for 4 heads
  EXPECT_THAT(validate_for_role(*medusa, NodeRole::kPrefill, false).message(), HasSubstr("one per head"));
}

// Medusa heads draft from the target's hidden states, so a decode node running them needs the
// prefill node to run Medusa too (the last prompt position's state travels with the hand-off).
TEST(PdRule, MedusaNeedsPrefillSideState) {
  EXPECT_FALSE(is_model_free_method("medusa"));
  const absl::Status s = check_pd_pairing({"", 0}, {"medusa", 4}, PdModel{"", false});
  EXPECT_THAT(s.message(), HasSubstr("needs draft-side state from prefill"));
  EXPECT_TRUE(check_pd_pairing({"medusa", 1}, {"medusa", 4}, PdModel{"", false}).ok());
}

// A DFlash drafter's context K/V of the prompt comes from the prefill node.
TEST(PdRule, DflashNeedsPrefillSideState) {
  EXPECT_FALSE(is_model_free_method("dflash"));
  EXPECT_THAT(check_pd_pairing({"", 0}, {"dflash", 4}, PdModel{"", false}).message(),
              HasSubstr("needs draft-side state from prefill"));
  EXPECT_TRUE(check_pd_pairing({"dflash", 1}, {"dflash", 4}, PdModel{"", false}).ok());
}

TEST(PdRule, PairingNamesBothValues) {
  auto make = [](int k) {
    SpeculativeConfig c;
    c.method = SpecMethod::kMtp;
    c.num_speculative_tokens = k;
    return c;
  };
  EXPECT_TRUE(pd_compatible(make(1), make(4), false).ok());
  EXPECT_THAT(pd_compatible(make(2), make(4), false).message(), HasSubstr("prefill must use 1"));
  EXPECT_THAT(pd_compatible(make(1), make(0), false).message(), HasSubstr("decode must use >= 1"));
  const auto recurrent = pd_compatible(make(1), make(4), true);
  EXPECT_THAT(recurrent.message(), HasSubstr("recurrent layers"));
  EXPECT_THAT(recurrent.message(), HasSubstr("prefill has 1, decode has 4"));
  EXPECT_TRUE(pd_compatible(make(3), make(3), true).ok());
  SpeculativeConfig other = make(4);
  other.method = SpecMethod::kEagle3;
  EXPECT_THAT(pd_compatible(make(1), other, false).message(), HasSubstr("method"));
}

}  // namespace
}  // namespace baton
