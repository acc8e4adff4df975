// --chat-template FILE|TEMPLATE (the router and `baton generate`, as vLLM takes it): the Jinja text
// a tokenizer renders chats with instead of tokenizer_config.json's chat_template.
//
// Must not: compile the template (Tokenizer::set_chat_template does, naming the flag on errors).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace baton {

// A readable file's contents (at most 1 MiB); else `arg` itself when it looks like a template (it
// has '{' or a line break, as vLLM decides); else an error saying the file is not there.
absl::StatusOr<std::string> chat_template_from_arg(const std::string& arg);

}  // namespace baton
