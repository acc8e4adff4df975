// common/pd_rule: every case of the P/D rule, for one node and for a (P, D) pair; every refusal
// names both values, the model kind and the rule.
#include "common/pd_rule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace baton {
namespace {

using ::testing::HasSubstr;

const PdModel kLlama{"LlamaForCausalLM", false};
const PdModel kHybrid{"Qwen3NextForCausalLM", true};

SpeculationSetting spec(const std::string& method, int k) { return {method, k}; }
const SpeculationSetting kNone{};

void expect_names_the_rule(const absl::Status& s) {
  EXPECT_THAT(s.message(), HasSubstr("P/D rule"));
  EXPECT_THAT(s.message(), HasSubstr("a prefill node runs num_speculative_tokens = 1 and a decode node >= 1"));
  EXPECT_THAT(s.message(), HasSubstr("recurrent layers both run the same k"));
}

TEST(PdRuleNode, PrefillRunsOneOnAttentionModels) {
  EXPECT_TRUE(check_pd_rule_for_node(PdRole::kPrefill, spec("eagle3", 1), kLlama).ok());
  const absl::Status s = check_pd_rule_for_node(PdRole::kPrefill, spec("eagle3", 3), kLlama);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("is 3 on a prefill node serving an attention-only model (LlamaForCausalLM)"));
  EXPECT_THAT(s.message(), HasSubstr("the P/D rule requires 1 there"));
  EXPECT_THAT(check_pd_rule_for_node(PdRole::kPrefill, spec("mtp", 2), kLlama).message(),
              HasSubstr("one per MTP layer"));
}

TEST(PdRuleNode, DecodeRunsAtLeastOne) {
  EXPECT_TRUE(check_pd_rule_for_node(PdRole::kDecode, spec("ngram", 5), kLlama).ok());
  const absl::Status s = check_pd_rule_for_node(PdRole::kDecode, spec("ngram", 0), kHybrid);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("is 0 on a decode node serving a hybrid model with recurrent layers"));
  EXPECT_THAT(s.message(), HasSubstr("requires k >= 1"));
}

TEST(PdRuleNode, RecurrentPrefillMayRunTheDecodeK) {
  EXPECT_TRUE(check_pd_rule_for_node(PdRole::kPrefill, spec("mtp", 3), kHybrid).ok());
  EXPECT_FALSE(check_pd_rule_for_node(PdRole::kPrefill, spec("mtp", 0), kHybrid).ok());
}

TEST(PdRuleNode, NoSpeculationIsAlwaysFine) {
  EXPECT_TRUE(check_pd_rule_for_node(PdRole::kPrefill, kNone, kLlama).ok());
  EXPECT_TRUE(check_pd_rule_for_node(PdRole::kDecode, kNone, kHybrid).ok());
}

TEST(PdRulePair, NeitherSpeculates) {
  EXPECT_TRUE(check_pd_pairing(kNone, kNone, kLlama).ok());
  EXPECT_TRUE(check_pd_pairing(kNone, kNone, kHybrid).ok());
}

TEST(PdRulePair, BothSpeculateWithTheSameMethod) {
  EXPECT_TRUE(check_pd_pairing(spec("eagle3", 1), spec("eagle3", 4), kLlama).ok());
  EXPECT_TRUE(check_pd_pairing(spec("mtp", 3), spec("mtp", 3), kHybrid).ok());

  const absl::Status p = check_pd_pairing(spec("eagle3", 2), spec("eagle3", 4), kLlama);
  EXPECT_EQ(p.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(p.message(), HasSubstr("the prefill node runs num_speculative_tokens = 2, but prefill must use 1"));
  EXPECT_THAT(p.message(), HasSubstr("prefill node: method eagle3, num_speculative_tokens 2"));
  EXPECT_THAT(p.message(), HasSubstr("decode node: method eagle3, num_speculative_tokens 4"));
  EXPECT_THAT(p.message(), HasSubstr("an attention-only model (LlamaForCausalLM)"));
  expect_names_the_rule(p);

  const absl::Status d = check_pd_pairing(spec("ngram", 1), spec("ngram", 0), kLlama);
  EXPECT_THAT(d.message(), HasSubstr("the decode node runs num_speculative_tokens = 0, but decode must use >= 1"));
  expect_names_the_rule(d);
}

TEST(PdRulePair, MethodsMustMatch) {
  const absl::Status s = check_pd_pairing(spec("eagle", 1), spec("mtp", 2), kLlama);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("prefill uses method eagle but decode uses mtp"));
  expect_names_the_rule(s);
}

TEST(PdRulePair, RecurrentModelsNeedEqualK) {
  const absl::Status s = check_pd_pairing(spec("mtp", 1), spec("mtp", 4), kHybrid);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("prefill has 1, decode has 4"));
  EXPECT_THAT(s.message(), HasSubstr("a hybrid model with recurrent layers (Qwen3NextForCausalLM)"));
  expect_names_the_rule(s);
}

TEST(PdRulePair, PrefillWithoutSpeculationFeedsModelFreeMethods) {
  EXPECT_TRUE(is_model_free_method("ngram"));
  EXPECT_TRUE(is_model_free_method("suffix"));
  EXPECT_TRUE(check_pd_pairing(kNone, spec("ngram", 4), kLlama).ok());
  EXPECT_TRUE(check_pd_pairing(kNone, spec("suffix", 24), kLlama).ok());
  // ...but not on recurrent models, whose state is located by k (0 on P, 4 on D).
  const absl::Status s = check_pd_pairing(kNone, spec("ngram", 4), kHybrid);
  EXPECT_THAT(s.message(), HasSubstr("prefill has 0 (no speculation), decode has 4"));
  expect_names_the_rule(s);
}

TEST(PdRulePair, DraftSideStateNeedsTheSameMethodOnPrefill) {
  for (const std::string method : {"draft_model", "eagle", "eagle3", "mtp"}) {
    EXPECT_FALSE(is_model_free_method(method));
    const absl::Status none = check_pd_pairing(kNone, spec(method, 3), kLlama);
    EXPECT_EQ(none.code(), absl::StatusCode::kFailedPrecondition) << method;
    EXPECT_THAT(none.message(), HasSubstr("the decode node's method " + method + " needs draft-side state"));
    EXPECT_THAT(none.message(), HasSubstr("the prefill node runs no speculation"));
    EXPECT_THAT(none.message(), HasSubstr("prefill node: no speculation; decode node: method " + method));
    expect_names_the_rule(none);
    const absl::Status other = check_pd_pairing(spec("ngram", 1), spec(method, 3), kLlama);
    EXPECT_THAT(other.message(), HasSubstr("prefill uses method ngram but decode uses " + method));
  }
}

TEST(PdRulePair, SpeculatingPrefillNeedsASpeculatingDecode) {
  const absl::Status s = check_pd_pairing(spec("eagle3", 1), kNone, kLlama);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("the prefill node speculates (method eagle3) but the decode node does not"));
  EXPECT_THAT(s.message(), HasSubstr("decode node: no speculation"));
  expect_names_the_rule(s);
}

}  // namespace
}  // namespace baton
