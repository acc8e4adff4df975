// Chat templates: tokenizer_config.json's "chat_template" (a Jinja template) compiled once and
// rendered for a conversation, the way transformers' apply_chat_template renders it (trim_blocks,
// lstrip_blocks, raise_exception, strftime_now, tojson without ASCII escaping).
//
// Debian 12 ships no C++ Jinja library, so this is a small interpreter for the subset real chat
// templates use (see chat_template_parser.h and chat_template_builtins.h for the list). Anything
// outside it fails at compile() or render() with the construct's name and line.
//
// Thread-safety: render() is const and may run concurrently. Must not: read files or the clock
// (except strftime_now, which templates call for today's date).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace baton {

namespace jinja {
struct Stmt;
}

class ChatTemplate {
 public:
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> compile(const std::string& source);
  ~ChatTemplate();
  // `variables`: a JSON object (messages, add_generation_prompt, bos_token, ...). Object keys reach
  // the template in the object's order: as written for an ordered_json (what `tojson` prints, as
  // transformers does), sorted for a plain nlohmann::json.
  absl::StatusOr<std::string> render(const nlohmann::ordered_json& variables) const;

 private:
  ChatTemplate();
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
};

}  // namespace baton
