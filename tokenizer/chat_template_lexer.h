// Lexer of the chat-template Jinja subset: applies transformers' environment options
// (trim_blocks, lstrip_blocks, one trailing newline dropped), whitespace control ({%- -%},
// {{- -}}, {#- -#}), drops comments, and splits tags into tokens.
//
// Must not: interpret tokens (the parser does), or accept an unterminated tag or string.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace baton::jinja {

struct Token {
  enum class Kind {
    kText,        // literal template text
    kExprOpen,    // {{
    kExprClose,   // }}
    kStmtOpen,    // {%
    kStmtClose,   // %}
    kName,        // identifiers and keywords
    kString,      // value holds the unescaped string
    kInteger,
    kFloat,
    kOperator,    // punctuation and operators: + - * / // % ** ~ == != < > <= >= = ( ) [ ] { } , . : |
    kEnd,
  };
  Kind kind;
  std::string value;
  int line;
};

// Throws TemplateError with the line on malformed input.
std::vector<Token> lex_template(std::string_view source);

}  // namespace baton::jinja
