#include "tokenizer/chat_template_parser.h"

#include <charconv>
#include <cstdlib>
#include <initializer_list>
#include <string_view>

#include "common/status.h"

namespace baton::jinja {

namespace {

using ExprPtr = std::unique_ptr<Expr>;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : tokens_(tokens) {}

  Body parse_all() {
    std::string end_tag;
    Body body = parse_body({}, end_tag);
    return body;
  }

 private:
  const Token& peek(std::size_t ahead = 0) const {
    std::size_t i = std::min(pos_ + ahead, tokens_.size() - 1);
    return tokens_[i];
  }
  const Token& next() { return tokens_[std::min(pos_++, tokens_.size() - 1)]; }
  [[noreturn]] void fail(const std::string& what) const {
    throw TemplateError(str_cat("line ", peek().line, ": ", what));
  }

  // Brackets, unary operators and blocks nest at most this deep: the parser recurses once per
  // level, and a template must not exhaust the stack (real templates nest a few levels).
  static constexpr int kMaxNesting = 200;
  class Nested {
   public:
    explicit Nested(Parser& parser) : parser_(parser) {
      if (++parser_.depth_ > kMaxNesting) parser_.fail(str_cat("nesting deeper than ", kMaxNesting, " levels"));
    }
    ~Nested() { --parser_.depth_; }
    Nested(const Nested&) = delete;
    Nested& operator=(const Nested&) = delete;

   private:
    Parser& parser_;
  };

  // Literals: 64-bit integers (Python's are unbounded: a larger one is an error here), and floats
  // as Python reads them (out of range: inf or 0).
  std::int64_t integer_literal() {
    const std::string& digits = next().value;
    std::int64_t v = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (ec != std::errc() || end != digits.data() + digits.size()) {
      fail(str_cat("integer literal ", digits.substr(0, 40), digits.size() > 40 ? "..." : "", " does not fit in 64 bits"));
    }
    return v;
  }
  double float_literal() { return std::strtod(next().value.c_str(), nullptr); }
  bool at_op(std::string_view op, std::size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::kOperator && peek(ahead).value == op;
  }
  bool at_name(std::string_view name, std::size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::kName && peek(ahead).value == name;
  }
  void expect_op(std::string_view op) {
    if (!at_op(op)) fail(str_cat("expected '", op, "', found ", describe(peek())));
    ++pos_;
  }
  void expect_name(std::string_view name) {
    if (!at_name(name)) fail(str_cat("expected '", name, "', found ", describe(peek())));
    ++pos_;
  }
  std::string expect_identifier() {
    if (peek().kind != Token::Kind::kName) fail(str_cat("expected a name, found ", describe(peek())));
    return next().value;
  }
  void expect_stmt_close() {
    if (peek().kind != Token::Kind::kStmtClose) fail(str_cat("expected '%}', found ", describe(peek())));
    ++pos_;
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Token::Kind::kText: return "template text";
      case Token::Kind::kExprOpen: return "'{{'";
      case Token::Kind::kExprClose: return "'}}'";
      case Token::Kind::kStmtOpen: return "'{%'";
      case Token::Kind::kStmtClose: return "'%}'";
      case Token::Kind::kEnd: return "the end of the template";
      case Token::Kind::kString: return "a string";
      default: return "'" + t.value + "'";
    }
  }

  // Parses statements until `{% <one of end_names> ...`; leaves pos_ after that name and stores it.
  Body parse_body(std::initializer_list<std::string_view> end_names, std::string& end_found) {
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.kind == Token::Kind::kEnd) {
        if (end_names.size() != 0) fail(str_cat("missing {% ", *(end_names.end() - 1), " %}"));
        return body;
      }
      if (t.kind == Token::Kind::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->line = t.line;
        s->text = t.value;
        body.push_back(std::move(s));
        ++pos_;
        continue;
      }
      if (t.kind == Token::Kind::kExprOpen) {
        ++pos_;
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kOutput;
        s->line = t.line;
        s->expr = parse_expression();
        if (peek().kind != Token::Kind::kExprClose) fail(str_cat("expected '}}', found ", describe(peek())));
        ++pos_;
        body.push_back(std::move(s));
        continue;
      }
      if (t.kind != Token::Kind::kStmtOpen) fail(str_cat("unexpected ", describe(t)));
      const Token& keyword = peek(1);
      if (keyword.kind != Token::Kind::kName) fail("expected a statement name after '{%'");
      for (std::string_view end : end_names) {
        if (keyword.value == end) {
          pos_ += 2;
          end_found = keyword.value;
          return body;
        }
      }
      pos_ += 2;
      body.push_back(parse_statement(keyword));
    }
  }

  std::unique_ptr<Stmt> parse_statement(const Token& keyword) {
    Nested nested(*this);
    auto s = std::make_unique<Stmt>();
    s->line = keyword.line;
    const std::string& k = keyword.value;
    std::string end;
    if (k == "if") {
      s->kind = Stmt::Kind::kIf;
      ExprPtr condition = parse_expression();
      expect_stmt_close();
      while (true) {
        Body branch = parse_body({"elif", "else", "endif"}, end);
        s->branches.emplace_back(std::move(condition), std::move(branch));
        if (end == "elif") {
          condition = parse_expression();
          expect_stmt_close();
          continue;
        }
        if (end == "else") {
          expect_stmt_close();
          s->else_body = parse_body({"endif"}, end);
        }
        expect_stmt_close();
        return s;
      }
    }
    if (k == "for") {
      s->kind = Stmt::Kind::kFor;
      s->targets.push_back(expect_identifier());
      while (at_op(",")) {
        ++pos_;
        s->targets.push_back(expect_identifier());
      }
      expect_name("in");
      s->expr = parse_or_expression();  // `if` here filters the loop, it is not a conditional
      if (at_name("if")) {
        ++pos_;
        s->condition = parse_expression();
      }
      if (at_name("recursive")) fail("recursive for loops are not supported");
      expect_stmt_close();
      s->body = parse_body({"else", "endfor"}, end);
      if (end == "else") {
        expect_stmt_close();
        s->else_body = parse_body({"endfor"}, end);
      }
      expect_stmt_close();
      return s;
    }
    if (k == "set") {
      s->targets.push_back(expect_identifier());
      if (at_op(".")) {
        ++pos_;
        s->attr = expect_identifier();
      }
      while (at_op(",")) {
        ++pos_;
        s->targets.push_back(expect_identifier());
      }
      if (peek().kind == Token::Kind::kStmtClose) {
        if (s->targets.size() != 1 || !s->attr.empty()) fail("a {% set %} block assigns exactly one name");
        ++pos_;
        s->kind = Stmt::Kind::kSetBlock;
        s->body = parse_body({"endset"}, end);
        expect_stmt_close();
        return s;
      }
      s->kind = Stmt::Kind::kSet;
      expect_op("=");
      s->expr = parse_tuple_or_expression();
      expect_stmt_close();
      return s;
    }
    if (k == "macro") {
      s->kind = Stmt::Kind::kMacro;
      s->name = expect_identifier();
      expect_op("(");
      while (!at_op(")")) {
        std::string param = expect_identifier();
        ExprPtr fallback;
        if (at_op("=")) {
          ++pos_;
          fallback = parse_expression();
        }
        s->params.emplace_back(param, std::move(fallback));
        if (!at_op(")")) expect_op(",");
      }
      ++pos_;
      expect_stmt_close();
      s->body = parse_body({"endmacro"}, end);
      expect_stmt_close();
      return s;
    }
    if (k == "break" || k == "continue") {
      s->kind = k == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      expect_stmt_close();
      return s;
    }
    fail(str_cat("unsupported statement {% ", k, " %} (supported: if, for, set, macro, break, continue)"));
  }

  // `a, b` without brackets (for set targets' values).
  ExprPtr parse_tuple_or_expression() {
    ExprPtr first = parse_expression();
    if (!at_op(",")) return first;
    auto tuple = make(Expr::Kind::kTuple);
    tuple->children.push_back(std::move(first));
    while (at_op(",")) {
      ++pos_;
      tuple->children.push_back(parse_expression());
    }
    return tuple;
  }

  ExprPtr make(Expr::Kind kind) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = peek().line;
    return e;
  }
  ExprPtr binary(std::string op, ExprPtr left, ExprPtr right) {
    auto e = make(Expr::Kind::kBinary);
    e->name = std::move(op);
    e->children.push_back(std::move(left));
    e->children.push_back(std::move(right));
    return e;
  }

  ExprPtr parse_expression() {
    Nested nested(*this);
    ExprPtr value = parse_or_expression();
    while (at_name("if")) {
      ++pos_;
      auto e = make(Expr::Kind::kCondition);
      e->children.push_back(std::move(value));
      e->children.push_back(parse_or_expression());
      if (at_name("else")) {
        ++pos_;
        e->children.push_back(parse_expression());
      } else {
        e->children.push_back(nullptr);
      }
      value = std::move(e);
    }
    return value;
  }

  ExprPtr parse_or_expression() {
    ExprPtr left = parse_and();
    while (at_name("or")) {
      ++pos_;
      left = binary("or", std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (at_name("and")) {
      ++pos_;
      left = binary("and", std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (at_name("not")) {
      Nested nested(*this);
      ++pos_;
      auto e = make(Expr::Kind::kUnary);
      e->name = "not";
      e->children.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr left = parse_math1();
    while (true) {
      if (peek().kind == Token::Kind::kOperator &&
          (at_op("==") || at_op("!=") || at_op("<") || at_op(">") || at_op("<=") || at_op(">="))) {
        std::string op = next().value;
        left = binary(op, std::move(left), parse_math1());
      } else if (at_name("in")) {
        ++pos_;
        left = binary("in", std::move(left), parse_math1());
      } else if (at_name("not") && at_name("in", 1)) {
        pos_ += 2;
        left = binary("not in", std::move(left), parse_math1());
      } else {
        return left;
      }
    }
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (at_op("+") || at_op("-")) {
      std::string op = next().value;
      left = binary(op, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (at_op("~")) {
      ++pos_;
      left = binary("~", std::move(left), parse_math2());
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      std::string op = next().value;
      left = binary(op, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (at_op("**")) {
      ++pos_;
      left = binary("**", std::move(left), parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filters) {
    ExprPtr node;
    if (at_op("-") || at_op("+")) {
      Nested nested(*this);
      auto e = make(Expr::Kind::kUnary);
      e->name = next().value;
      e->children.push_back(parse_unary(false));
      node = std::move(e);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filters) node = parse_filters_and_tests(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    switch (t.kind) {
      case Token::Kind::kString: {
        auto e = make(Expr::Kind::kLiteral);
        std::string s = next().value;
        while (peek().kind == Token::Kind::kString) s += next().value;  // adjacent literals concatenate
        e->literal = Value::string(std::move(s));
        return e;
      }
      case Token::Kind::kInteger: {
        auto e = make(Expr::Kind::kLiteral);
        e->literal = Value::integer(integer_literal());
        return e;
      }
      case Token::Kind::kFloat: {
        auto e = make(Expr::Kind::kLiteral);
        e->literal = Value::floating(float_literal());
        return e;
      }
      case Token::Kind::kName: {
        const std::string& n = t.value;
        auto e = make(Expr::Kind::kLiteral);
        if (n == "true" || n == "True") {
          e->literal = Value::boolean(true);
        } else if (n == "false" || n == "False") {
          e->literal = Value::boolean(false);
        } else if (n == "none" || n == "None") {
          e->literal = Value::none();
        } else {
          e->kind = Expr::Kind::kName;
          e->name = n;
        }
        ++pos_;
        return e;
      }
      case Token::Kind::kOperator:
        if (t.value == "(") {
          ++pos_;
          if (at_op(")")) {
            ++pos_;
            return make(Expr::Kind::kTuple);
          }
          ExprPtr inner = parse_expression();
          if (at_op(",")) {
            auto tuple = make(Expr::Kind::kTuple);
            tuple->children.push_back(std::move(inner));
            while (at_op(",")) {
              ++pos_;
              if (at_op(")")) break;
              tuple->children.push_back(parse_expression());
            }
            inner = std::move(tuple);
          }
          expect_op(")");
          return inner;
        }
        if (t.value == "[") {
          ++pos_;
          auto list = make(Expr::Kind::kList);
          while (!at_op("]")) {
            list->children.push_back(parse_expression());
            if (!at_op("]")) expect_op(",");
          }
          ++pos_;
          return list;
        }
        if (t.value == "{") {
          ++pos_;
          auto dict = make(Expr::Kind::kDict);
          while (!at_op("}")) {
            dict->children.push_back(parse_expression());
            expect_op(":");
            dict->children.push_back(parse_expression());
            if (!at_op("}")) expect_op(",");
          }
          ++pos_;
          return dict;
        }
        break;
      default:
        break;
    }
    fail(str_cat("expected an expression, found ", describe(t)));
  }

  void parse_call_arguments(Expr& call) {
    expect_op("(");
    while (!at_op(")")) {
      if (peek().kind == Token::Kind::kName && at_op("=", 1)) {
        std::string key = next().value;
        ++pos_;
        call.kwargs.emplace_back(key, parse_expression());
      } else {
        call.children.push_back(parse_expression());
      }
      if (!at_op(")")) expect_op(",");
    }
    ++pos_;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (at_op(".")) {
        ++pos_;
        auto e = make(Expr::Kind::kGetAttr);
        if (peek().kind == Token::Kind::kInteger) {  // x.0 is x[0] in Jinja
          e->kind = Expr::Kind::kGetItem;
          e->children.push_back(std::move(node));
          auto index = make(Expr::Kind::kLiteral);
          index->literal = Value::integer(integer_literal());
          e->children.push_back(std::move(index));
        } else {
          e->name = expect_identifier();
          e->children.push_back(std::move(node));
        }
        node = std::move(e);
      } else if (at_op("[")) {
        ++pos_;
        ExprPtr parts[3];
        bool is_slice = false;
        for (int i = 0; i < 3; ++i) {
          if (!at_op(":") && !at_op("]")) parts[i] = parse_expression();
          if (i < 2 && at_op(":")) {
            is_slice = true;
            ++pos_;
          } else {
            break;
          }
        }
        expect_op("]");
        auto e = make(is_slice ? Expr::Kind::kSlice : Expr::Kind::kGetItem);
        e->children.push_back(std::move(node));
        if (!is_slice && !parts[0]) fail("empty subscript []");
        e->children.push_back(std::move(parts[0]));
        if (is_slice) {
          e->children.push_back(std::move(parts[1]));
          e->children.push_back(std::move(parts[2]));
        }
        node = std::move(e);
      } else if (at_op("(")) {
        auto e = make(Expr::Kind::kCall);
        e->children.push_back(std::move(node));
        parse_call_arguments(*e);
        node = std::move(e);
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filters_and_tests(ExprPtr node) {
    while (true) {
      if (at_op("|")) {
        ++pos_;
        auto e = make(Expr::Kind::kFilter);
        e->name = expect_identifier();
        e->children.push_back(std::move(node));
        if (at_op("(")) parse_call_arguments(*e);
        node = parse_postfix(std::move(e));
      } else if (at_name("is")) {
        ++pos_;
        auto e = make(Expr::Kind::kTest);
        if (at_name("not")) {
          ++pos_;
          e->negated = true;
        }
        // Tests named like literals: `is none`, `is true`, `is false`.
        e->name = expect_identifier();
        e->children.push_back(std::move(node));
        if (at_op("(")) {
          parse_call_arguments(*e);
        } else if (starts_test_argument()) {
          e->children.push_back(parse_unary(false));
        }
        node = std::move(e);
      } else {
        return node;
      }
    }
  }

  // `x is divisibleby 3`, `x is equalto 'y'`: one argument without parentheses.
  bool starts_test_argument() const {
    const Token& t = peek();
    if (t.kind == Token::Kind::kString || t.kind == Token::Kind::kInteger || t.kind == Token::Kind::kFloat) return true;
    if (t.kind == Token::Kind::kName) {
      static const char* kStops[] = {"and", "or", "else", "if", "in", "not", "is", "recursive"};
      for (const char* stop : kStops) {
        if (t.value == stop) return false;
      }
      return true;
    }
    return false;
  }

  const std::vector<Token>& tokens_;
  std::size_t pos_ = 0;
  int depth_ = 0;  // Nested levels open
};

}  // namespace

Body parse_template(const std::vector<Token>& tokens) { return Parser(tokens).parse_all(); }

}  // namespace baton::jinja
