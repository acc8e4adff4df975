// Parser of the chat-template Jinja subset: tokens -> statement tree. Statements: if/elif/else,
// for (with else and an inline if filter, tuple targets), set (names, tuples, namespace
// attributes, set blocks), macro, break, continue. Expressions: Jinja2's precedence
// (conditional, or, and, not, comparisons/in/is, + -, ~, * / // %, **, unary), literals,
// lists, tuples, dicts, attribute/item access, slices, calls with keyword arguments, filters,
// tests.
//
// Must not: accept a statement or syntax it does not know; the error names it and its line.
#pragma once

#include <vector>

#include "tokenizer/chat_template_ast.h"
#include "tokenizer/chat_template_lexer.h"

namespace baton::jinja {

// Throws TemplateError on syntax errors and unsupported statements.
Body parse_template(const std::vector<Token>& tokens);

}  // namespace baton::jinja
