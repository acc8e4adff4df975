// Built-in filters, tests, methods and global functions of the chat-template interpreter, with
// Python Jinja2 (as configured by transformers) semantics:
//   filters  trim tojson length count upper lower title capitalize first last join default d
//            string int float list items reverse sort unique map select reject selectattr
//            rejectattr replace abs round indent safe escape e wordcount sum min max dictsort
//   tests    defined undefined none boolean true false string number integer float mapping
//            iterable sequence callable odd even divisibleby eq equalto == sameas ne != lt < gt >
//            le <= ge >= in lower upper
//   methods  str: strip lstrip rstrip split rsplit startswith endswith upper lower title
//            capitalize replace find count join isdigit isalpha isalnum isspace islower isupper;
//            dict: items keys values get
//   globals  namespace raise_exception range dict strftime_now
//
// Must not: mutate its arguments (transformers renders in an immutable sandbox), or fall back to a
// guess for a name it does not know: it throws TemplateError naming the name.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/chat_template_value.h"

namespace baton::jinja {

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // Argument `index` or keyword `name`, else `fallback`.
  Value get(std::size_t index, const char* name, Value fallback = Value()) const;
};

Value apply_filter(const std::string& name, const Value& operand, const CallArgs& args);
bool apply_test(const std::string& name, const Value& operand, const CallArgs& args);
// Method `name` of `object` (strings and dicts); throws TemplateError when there is none.
Value call_method(const Value& object, const std::string& name, const CallArgs& args);
// Global function `name`; throws TemplateError when there is none.
Value call_global(const std::string& name, const CallArgs& args);
bool is_global_function(const std::string& name);

// Shared by the evaluator's operators.
bool contains(const Value& container, const Value& item);
int compare(const Value& a, const Value& b);  // <0, 0, >0; throws on incomparable types
std::vector<Value> iterate(const Value& v);   // list items, dict keys, string characters
Value get_attribute(const Value& object, const std::string& name);
Value get_item(const Value& object, const Value& key);
Value slice(const Value& object, const Value& start, const Value& stop, const Value& step);

}  // namespace baton::jinja
