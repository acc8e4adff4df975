// Python str semantics the chat-template builtins need: code-point indexing, whitespace as
// str.isspace() defines it, strip/split/case mapping, and the str methods templates call.
//
// Must not: depend on the evaluator; everything here is a pure function of its arguments.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_template_builtins.h"
#include "tokenizer/chat_template_value.h"

namespace baton::jinja {

std::vector<std::string> code_points(std::string_view s);  // one UTF-8 string per code point
// haystack.find(needle, from), in time linear in haystack and needle even for long needles (a
// naive search of 'aa...ab' in 'aa...a' takes haystack × needle steps).
std::size_t find_text(std::string_view haystack, std::string_view needle, std::size_t from);
std::string python_strip(std::string_view s, const Value& chars, bool left, bool right);
std::string python_upper(std::string_view s);
std::string python_lower(std::string_view s);
std::string python_title(std::string_view s);
std::string python_capitalize(std::string_view s);
std::string python_replace(std::string_view s, std::string_view old_text, std::string_view new_text, long long count);
// str.split(sep, maxsplit): sep undefined/none splits on whitespace runs.
std::vector<std::string> python_split(std::string_view s, const Value& sep, long long maxsplit);
// Whether `name` is a str method; call_string_method throws for unknown names.
Value call_string_method(const std::string& s, const std::string& name, const CallArgs& args);

}  // namespace baton::jinja
