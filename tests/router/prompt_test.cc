// router/prompt: the public request's prompt becomes the ids `baton generate` makes from the same
// input (cli/generate.cc: --prompt is encoded with special tokens; --chat is rendered with the chat
// template and the rendering encoded without them), on the bundled model's real tokenizer. Token-id
// mode refuses text and chat; limits name the field.
#include "router/prompt.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include "nlohmann/json.hpp"
#include "tests/support/scratch.h"

namespace baton::router {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string bundled_dir() { return std::string(BATON_SOURCE_DIR) + "/models/baton-tiny-code/target"; }

// The bundled tokenizer with its chat template replaced (nullopt: removed).
std::string tokenizer_dir_with(const std::string& name, const std::optional<std::string>& chat_template) {
  const auto d = baton::testing::scratch_path("baton-router-prompt-test-" + name);
  std::filesystem::create_directories(d);
  std::filesystem::copy_file(bundled_dir() + "/tokenizer.json", d / "tokenizer.json",
                             std::filesystem::copy_options::overwrite_existing);
  std::ifstream in(bundled_dir() + "/tokenizer_config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  if (chat_template) config["chat_template"] = *chat_template;
  else config.erase("chat_template");
  std::ofstream(d / "tokenizer_config.json") << config.dump();
  return d.string();
}

// ChatML, whose markers the tests below look for.
std::string chat_tokenizer_dir() {
  static const std::string dir = tokenizer_dir_with(
      "chatml", "{{ bos_token }}{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + "
                "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}");
  return dir;
}

// A tokenizer without a chat template.
std::string templateless_dir() {
  static const std::string dir = tokenizer_dir_with("none", std::nullopt);
  return dir;
}

std::unique_ptr<Tokenizer> load(const std::string& dir) {
  auto t = Tokenizer::load(dir);
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(*t);
}

TEST(Prompt, TextIsEncodedAsBatonGenerateDoes) {
  auto tokenizer = load(bundled_dir());
  PromptEncoder encoder(tokenizer.get());
  baton::v1::GenerateRequest r;
  r.set_text("def fib(n):\n    return n");
  auto p = encoder.encode(r);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->ids, tokenizer->encode(r.text(), /*add_special_tokens=*/true));
  ASSERT_FALSE(p->ids.empty());
  EXPECT_EQ(p->ids.front(), 0);  // the bundled post-processor adds <|endoftext|> as BOS

  // Tokenize gives the same ids by default, and honours add_special_tokens = false.
  baton::v1::TokenizeRequest t;
  t.set_text(r.text());
  EXPECT_EQ(encoder.encode(t)->ids, p->ids);
  t.set_add_special_tokens(false);
  EXPECT_EQ(encoder.encode(t)->ids, tokenizer->encode(r.text(), false));
}

TEST(Prompt, ChatIsRenderedThenEncodedWithoutSpecialTokens) {
  auto tokenizer = load(chat_tokenizer_dir());
  ASSERT_TRUE(tokenizer->has_chat_template());
  PromptEncoder encoder(tokenizer.get());
  baton::v1::GenerateRequest r;
  auto* chat = r.mutable_chat();
  auto* m = chat->add_messages();
  m->set_role("system");
  m->set_content("You write Python.");
  m = chat->add_messages();
  m->set_role("user");
  m->set_content("def add(a, b):");
  auto p = encoder.encode(r);
  ASSERT_TRUE(p.ok()) << p.status();

  // What cli/generate.cc does with --chat.
  const nlohmann::json messages = nlohmann::json::parse(
      R"([{"role":"system","content":"You write Python."},{"role":"user","content":"def add(a, b):"}])");
  auto rendered = tokenizer->apply_chat_template(messages, /*add_generation_prompt=*/true);
  ASSERT_TRUE(rendered.ok());
  EXPECT_EQ(p->rendered, *rendered);
  EXPECT_EQ(p->ids, tokenizer->encode(*rendered, /*add_special_tokens=*/false));
  EXPECT_EQ(p->ids.front(), 0);
  EXPECT_NE(p->ids[1], 0);  // BOS once: from the template, not again from the post-processor

  chat->set_add_generation_prompt(false);
  auto without = encoder.encode(r);
  EXPECT_EQ(without->ids, tokenizer->encode(*tokenizer->apply_chat_template(messages, false), false));
  EXPECT_LT(without->ids.size(), p->ids.size());

  baton::v1::TokenizeRequest t;
  *t.mutable_chat() = r.chat();
  t.mutable_chat()->clear_add_generation_prompt();
  auto tokenized = encoder.encode(t);
  EXPECT_EQ(tokenized->ids, p->ids);
  EXPECT_EQ(tokenized->rendered, *rendered);
}

// Tools and the history's calls reach the template as transformers passes them (OpenAI's shape,
// arguments as objects, everything in the order written): the bundled template lists the tools and
// writes the calls, as rendering the same JSON directly does.
TEST(Prompt, ToolsAndCallsReachTheTemplateInTheirOrder) {
  auto tokenizer = load(bundled_dir());
  PromptEncoder encoder(tokenizer.get());
  baton::v1::GenerateRequest r;
  auto* chat = r.mutable_chat();
  auto* tool = chat->add_tools();
  tool->set_name("get_weather");
  tool->set_description("Weather.");
  tool->set_parameters(R"({"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}}})");
  chat->add_tools()->set_name("now");
  auto* m = chat->add_messages();
  m->set_role("user");
  m->set_content("Weather?");
  m = chat->add_messages();
  m->set_role("assistant");
  auto* call = m->add_tool_calls();
  call->set_id("call_1");
  call->set_name("get_weather");
  call->set_arguments(R"({"city": "Oslo", "days": 2})");
  m = chat->add_messages();
  m->set_role("tool");
  m->set_tool_call_id("call_1");
  m->set_content("cold");
  auto p = encoder.encode(r);
  ASSERT_TRUE(p.ok()) << p.status();

  const auto messages = nlohmann::ordered_json::parse(R"([{"role":"user","content":"Weather?"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",
       "function":{"name":"get_weather","arguments":{"city":"Oslo","days":2}}}]},
      {"role":"tool","content":"cold","tool_call_id":"call_1"}])");
  const auto tools = nlohmann::ordered_json::parse(R"([{"type":"function","function":{"name":"get_weather",
      "description":"Weather.","parameters":{"type":"object","properties":{"city":{"type":"string"},
      "days":{"type":"integer"}}}}},{"type":"function","function":{"name":"now"}}])");
  auto expected = tokenizer->apply_chat_template(messages, /*add_generation_prompt=*/true, tools);
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_EQ(p->rendered, *expected);
  EXPECT_THAT(p->rendered, HasSubstr(R"({"type": "function", "function": {"name": "get_weather", "description")"));
  EXPECT_THAT(p->rendered, HasSubstr(R"(<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}})"));
  EXPECT_THAT(p->rendered, HasSubstr("# tool\ncold\n"));

  call->set_arguments("[1]");
  EXPECT_THAT(encoder.encode(r).status().message(),
              HasSubstr("prompt.chat.messages[1].tool_calls[0].arguments must be an object"));
  call->set_arguments("{}");
  chat->mutable_tools(0)->set_parameters("nope");
  EXPECT_THAT(encoder.encode(r).status().message(), HasSubstr("prompt.chat.tools[0].parameters must be"));
}

TEST(Prompt, ChatNeedsATemplateAndMessages) {
  auto tokenizer = load(templateless_dir());
  PromptEncoder encoder(tokenizer.get());
  baton::v1::GenerateRequest r;
  r.mutable_chat();
  EXPECT_THAT(encoder.encode(r).status().message(), HasSubstr("prompt.chat.messages is empty"));
  auto* m = r.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("hi");
  const auto s = encoder.encode(r).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("no chat_template"));
}

TEST(Prompt, TokenIdsPassThroughAndEmptyOrMissingPromptsAreRefused) {
  PromptEncoder encoder(nullptr);
  baton::v1::GenerateRequest r;
  EXPECT_THAT(encoder.encode(r).status().message(), HasSubstr("prompt is missing"));
  r.mutable_token_ids();
  EXPECT_THAT(encoder.encode(r).status().message(), HasSubstr("prompt.token_ids is empty"));
  r.mutable_token_ids()->add_ids(7);
  r.mutable_token_ids()->add_ids(8);
  EXPECT_THAT(encoder.encode(r)->ids, ElementsAre(7, 8));
  auto tokenizer = load(bundled_dir());
  PromptEncoder with(tokenizer.get());
  baton::v1::GenerateRequest empty_text;
  empty_text.set_text("");
  EXPECT_THAT(with.encode(empty_text).status().message(), HasSubstr("prompt.text is empty"));
}

TEST(Prompt, TokenIdModeRefusesTextAndChat) {
  PromptEncoder encoder(nullptr);
  EXPECT_FALSE(encoder.has_tokenizer());
  baton::v1::GenerateRequest r;
  r.set_text("hello");
  const auto s = encoder.encode(r).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("token-id mode"));
  EXPECT_THAT(s.message(), HasSubstr("prompt.token_ids"));
  r.mutable_chat()->add_messages()->set_content("hello");
  EXPECT_THAT(encoder.encode(r).status().message(), HasSubstr("token-id mode"));
  baton::v1::TokenizeRequest t;
  t.set_text("hello");
  EXPECT_EQ(encoder.encode(t).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PromptLimits, VocabularyAndModelLength) {
  baton::v1::SamplingParams sampling;
  EXPECT_TRUE(check_prompt_limits({0, 5, 4095}, sampling, 4096, 2048, "decode node d:1").ok());
  const auto id = check_prompt_limits({0, 4096}, sampling, 4096, 2048, "decode node d:1");
  EXPECT_EQ(id.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(id.message(), HasSubstr("prompt.token_ids[1] = 4096 is outside [0, 4096)"));
  EXPECT_THAT(check_prompt_limits({-1}, sampling, 4096, 2048, "d").message(), HasSubstr("[0] = -1"));

  std::vector<std::int32_t> ids(2040, 1);
  // Unset max_tokens is the default 16: 2040 + 16 > 2048.
  const auto unset = check_prompt_limits(ids, sampling, 4096, 2048, "decode node d:1");
  EXPECT_THAT(unset.message(), HasSubstr("prompt (2040 tokens) + sampling.max_tokens (16, the default) = 2056 "
                                         "exceeds max_model_len 2048 of decode node d:1"));
  sampling.set_max_tokens(8);
  EXPECT_TRUE(check_prompt_limits(ids, sampling, 4096, 2048, "d").ok());
  sampling.set_max_tokens(9);
  EXPECT_THAT(check_prompt_limits(ids, sampling, 4096, 2048, "d").message(), HasSubstr("sampling.max_tokens (9)"));
}

}  // namespace
}  // namespace baton::router
