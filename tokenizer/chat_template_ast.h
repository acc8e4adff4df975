// Syntax tree of the chat-template Jinja subset, produced by the parser and walked by the
// evaluator. One generic node shape per family (expressions, statements) keeps the tree small;
// the comment on each Kind says which fields it uses.
//
// Must not: evaluate anything.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/chat_template_value.h"

namespace baton::jinja {

struct Expr {
  enum class Kind {
    kLiteral,    // literal
    kName,       // name
    kList,       // children = items
    kTuple,      // children = items
    kDict,       // children = key0, value0, key1, value1, ...
    kGetAttr,    // children[0] . name
    kGetItem,    // children[0] [ children[1] ]
    kSlice,      // children[0] [ children[1] : children[2] : children[3] ] (null = omitted)
    kCall,       // children[0] ( children[1..], kwargs )
    kFilter,     // children[0] | name ( children[1..], kwargs )
    kTest,       // children[0] is [not] name ( children[1..] ); negated
    kUnary,      // name in {"-", "+", "not"}; children[0]
    kBinary,     // name is the operator (incl. "and", "or", "in", "not in"); children[0], children[1]
    kCondition,  // children[0] if children[1] else children[2] (null = undefined)
  };
  Kind kind;
  int line = 0;
  Value literal;
  std::string name;
  bool negated = false;
  std::vector<std::unique_ptr<Expr>> children;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches (condition, body) ..., else_body
    kFor,       // for targets in expr [if condition] body [else else_body]
    kSet,       // set targets = expr, or set targets[0].attr = expr when attr is non-empty
    kSetBlock,  // {% set targets[0] %} body {% endset %}
    kMacro,     // macro name(params) body
    kBreak,
    kContinue,
  };
  Kind kind;
  int line = 0;
  std::string text;
  std::unique_ptr<Expr> expr;
  std::unique_ptr<Expr> condition;
  std::vector<std::pair<std::unique_ptr<Expr>, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::string> targets;
  std::string attr;
  std::string name;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> params;  // default may be null
};

// What a macro Value refers to; the tree it points into is owned by the compiled template.
struct MacroDef {
  std::string name;
  const std::vector<std::pair<std::string, std::unique_ptr<Expr>>>* params;
  const Body* body;
};

}  // namespace baton::jinja
