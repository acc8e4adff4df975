#include "tokenizer/chat_template.h"

#include "common/status.h"
#include "tokenizer/chat_template_eval.h"
#include "tokenizer/chat_template_lexer.h"
#include "tokenizer/chat_template_parser.h"
#include "tokenizer/unicode.h"

namespace baton {

struct ChatTemplate::Compiled {
  jinja::Body body;
};

ChatTemplate::ChatTemplate() = default;
ChatTemplate::~ChatTemplate() = default;

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::compile(const std::string& source) {
  // The string code walks code points and assumes well-formed UTF-8 (unicode::next_code_point).
  if (!unicode::is_valid_utf8(source)) return absl::InvalidArgumentError("chat template is not valid UTF-8");
  auto result = std::unique_ptr<ChatTemplate>(new ChatTemplate());
  result->compiled_ = std::make_unique<Compiled>();
  try {
    result->compiled_->body = jinja::parse_template(jinja::lex_template(source));
  } catch (const jinja::TemplateError& e) {
    return absl::InvalidArgumentError(str_cat("chat template does not compile: ", e.what()));
  }
  return result;
}

absl::StatusOr<std::string> ChatTemplate::render(const nlohmann::ordered_json& variables) const {
  if (!variables.is_object()) return absl::InvalidArgumentError("chat template variables must be a JSON object");
  try {
    jinja::Evaluator evaluator(jinja::Value::from_json(variables));
    return evaluator.render(compiled_->body);
  } catch (const jinja::TemplateError& e) {
    return absl::InvalidArgumentError(str_cat("chat template rendering failed: ", e.what()));
  }
}

}  // namespace baton
