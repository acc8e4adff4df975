// Chat templates against @huggingface/jinja (Hugging Face's renderer): every template shipped in
// the real and fixture tokenizer_config.json files, plus the feature templates in templates/,
// rendered for every conversation of conversations.json with and without add_generation_prompt.
// Texts must be identical; where the reference raises (e.g. raise_exception), we must fail too.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "nlohmann/json.hpp"
#include "test_support.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_config.h"

namespace baton {
namespace {

struct TemplateCase {
  std::string source;
  nlohmann::json variables;          // bos_token, eos_token, ...
  const Tokenizer* tokenizer = nullptr;  // renders through Tokenizer::apply_chat_template when set
};

TEST(ChatTemplateReference, RendersLikeHuggingFaceJinja) {
  std::string problem = testing::reference_setup_problem();
  ASSERT_TRUE(problem.empty()) << problem;

  std::map<std::string, TemplateCase> cases;
  std::vector<std::unique_ptr<Tokenizer>> tokenizers;
  auto dirs = testing::real_tokenizer_dirs();
  for (const auto& d : testing::fixture_tokenizer_dirs()) dirs.push_back(d);
  dirs.push_back(testing::bundled_tokenizer_dir());  // the bundled model's own chat template
  for (const auto& dir : dirs) {
    auto config = load_tokenizer_config(dir.path);
    ASSERT_TRUE(config.ok()) << config.status();
    if (!config->chat_template) continue;
    auto tokenizer = Tokenizer::load(dir.path);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    TemplateCase c;
    c.source = *config->chat_template;
    c.variables = nlohmann::json::object();
    if (config->bos_token) c.variables["bos_token"] = *config->bos_token;
    if (config->eos_token) c.variables["eos_token"] = *config->eos_token;
    if (config->unk_token) c.variables["unk_token"] = *config->unk_token;
    if (config->pad_token) c.variables["pad_token"] = *config->pad_token;
    c.tokenizer = tokenizer->get();
    tokenizers.push_back(std::move(tokenizer).value());
    cases[dir.name] = std::move(c);
  }
  const std::string templates_dir = testing::source_dir() + "/tests/tokenizer/templates";
  for (const auto& entry : std::filesystem::directory_iterator(templates_dir)) {
    if (entry.path().extension() != ".jinja") continue;
    TemplateCase c;
    c.source = testing::read_file(entry.path().string());
    c.variables = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
    cases["template-" + entry.path().stem().string()] = std::move(c);
  }
  ASSERT_GE(cases.size(), 8u);

  // Ordered: a tool's schema and a call's arguments reach `tojson` in the order they were written.
  auto conversations = nlohmann::ordered_json::parse(
      testing::read_file(testing::source_dir() + "/tests/tokenizer/conversations.json"), nullptr, false);
  ASSERT_FALSE(conversations.is_discarded()) << "conversations.json is not JSON";
  nlohmann::ordered_json request = {{"templates", nlohmann::json::object()},
                                    {"variables", nlohmann::json::object()},
                                    {"conversations", conversations}};
  for (const auto& [name, c] : cases) {
    request["templates"][name] = c.source;
    request["variables"][name] = c.variables;
  }
  std::string request_path =
      (std::filesystem::temp_directory_path() / ("baton-chat-cases-" + std::to_string(getpid()) + ".json")).string();
  testing::write_file(request_path, request.dump());
  int code = 0;
  std::string out = testing::run_command(
      "node " + testing::shell_quote(testing::reference_dir() + "/render_reference.js") + " " +
          testing::shell_quote(request_path),
      code);
  std::filesystem::remove(request_path);
  ASSERT_EQ(code, 0) << "the reference script failed";
  auto reference = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(reference.is_discarded());

  std::map<std::string, std::unique_ptr<ChatTemplate>> compiled;
  int mismatches = 0, checked = 0, errors = 0;
  for (const auto& r : reference["renders"]) {
    const std::string name = r["template"].get<std::string>();
    const TemplateCase& c = cases.at(name);
    const auto& conversation = conversations[r["conversation"].get<std::size_t>()];
    const bool with_tools = conversation.is_object();
    const auto& messages = with_tools ? conversation["messages"] : conversation;
    const nlohmann::ordered_json tools = with_tools ? conversation["tools"] : nlohmann::ordered_json();
    bool add_generation_prompt = r["add_generation_prompt"].get<bool>();
    absl::StatusOr<std::string> ours;
    if (c.tokenizer != nullptr) {
      ours = c.tokenizer->apply_chat_template(messages, add_generation_prompt, tools);
    } else {
      if (!compiled.count(name)) {
        auto t = ChatTemplate::compile(c.source);
        ASSERT_TRUE(t.ok()) << name << ": " << t.status();
        compiled[name] = std::move(t).value();
      }
      nlohmann::ordered_json variables = c.variables;
      variables["messages"] = messages;
      if (!tools.empty()) variables["tools"] = tools;
      variables["add_generation_prompt"] = add_generation_prompt;
      ours = compiled[name]->render(variables);
    }
    ++checked;
    bool ok;
    if (r.contains("error")) {
      ++errors;
      ok = !ours.ok();
      if (!ok) {
        ADD_FAILURE() << name << " conversation " << r["conversation"] << " gen=" << add_generation_prompt
                      << ": the reference fails (" << r["error"] << ") but we rendered "
                      << nlohmann::json(*ours).dump();
      }
    } else {
      ok = ours.ok() && *ours == r["text"].get<std::string>();
      if (!ok) {
        ADD_FAILURE() << name << " conversation " << r["conversation"] << " gen=" << add_generation_prompt
                      << "\n  ours     " << (ours.ok() ? nlohmann::json(*ours).dump() : ours.status().ToString())
                      << "\n  expected " << r["text"].dump();
      }
    }
    mismatches += ok ? 0 : 1;
  }
  EXPECT_EQ(mismatches, 0);
  std::printf("[ reference ] chat templates: %zu templates, %d renders (%d expected errors), %d mismatches\n",
              cases.size(), checked, errors, mismatches);
}

}  // namespace
}  // namespace baton
