// Evaluator of the chat-template Jinja subset: walks the statement tree with a scope stack
// (for loops and macro calls open a scope; set writes the innermost one, as in Jinja2) and
// renders text.
//
// Bounds (chat_template_limits.h): render() installs a RenderBudget (steps and text of the whole
// render), evaluation nests at most kMaxEvalDepth levels and macros kMaxMacroDepth, and the
// rendered text (or a {% set %} block's) is at most kMaxStringBytes; past any of them, a
// TemplateError naming the bound.
//
// Must not: touch anything outside the values it is given (no I/O, no globals); every error is a
// TemplateError naming the construct and line.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tokenizer/chat_template_ast.h"
#include "tokenizer/chat_template_builtins.h"
#include "tokenizer/chat_template_value.h"

namespace baton::jinja {

class Evaluator {
 public:
  // `globals`: a dict of the template's variables.
  explicit Evaluator(const Value& globals);
  std::string render(const Body& body);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  using Scope = std::vector<std::pair<std::string, Value>>;

  Flow exec(const Body& body, std::string& out);
  Flow exec(const Stmt& stmt, std::string& out);
  Flow exec_for(const Stmt& stmt, std::string& out);
  void assign(const std::string& name, Value value);
  // Appends to the rendered text (or a {% set %} block's), within kMaxStringBytes.
  static void emit(std::string& out, const std::string& text, int line);
  Value lookup(const std::string& name) const;

  Value eval(const Expr& e);
  Value eval_binary(const Expr& e);
  Value eval_call(const Expr& e);
  CallArgs eval_arguments(const Expr& e, std::size_t first_argument);
  Value call_macro(const MacroDef& macro, const CallArgs& args);

  class Nested;  // counts one level of eval_depth_

  std::vector<Scope> scopes_;
  int eval_depth_ = 0;   // nested exec(Stmt) / eval(Expr), up to kMaxEvalDepth
  int macro_depth_ = 0;  // nested macro calls, up to kMaxMacroDepth
};

}  // namespace baton::jinja
