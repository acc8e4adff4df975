#include "tokenizer/chat_template_eval.h"

#include <cmath>

#include "common/status.h"
#include "tokenizer/chat_template_arithmetic.h"
#include "tokenizer/chat_template_limits.h"

namespace baton::jinja {

namespace {

[[noreturn]] void fail_at(int line, const std::string& what) { throw TemplateError(str_cat("line ", line, ": ", what)); }

// Re-throws a builtin's TemplateError with the line of the expression that called it.
template <class F>
auto at_line(int line, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const TemplateError& e) {
    std::string what = e.what();
    if (what.rfind("line ", 0) == 0) throw;
    fail_at(line, what);
  }
}

}  // namespace

// One level of evaluation: a step of the budget, and a level of eval_depth_. The evaluator recurses
// once per statement and expression node, so a deep tree (1+1+...+1 nests one level per '+'; the
// parser only bounds brackets and blocks) must end in an error, not exhaust the stack.
class Evaluator::Nested {
 public:
  Nested(Evaluator& evaluator, int line) : depth_(evaluator.eval_depth_) {
    RenderBudget::steps();
    if (++depth_ > kMaxEvalDepth) {
      fail_at(line, str_cat("expressions and statements nest deeper than ", kMaxEvalDepth,
                            " levels (a chain of operators, filters or attributes, or macro recursion)"));
    }
  }
  ~Nested() { --depth_; }
  Nested(const Nested&) = delete;
  Nested& operator=(const Nested&) = delete;

 private:
  int& depth_;
};

Evaluator::Evaluator(const Value& globals) {
  scopes_.emplace_back();
  for (const auto& [k, v] : globals.as_dict()) scopes_.back().emplace_back(k, v);
}

std::string Evaluator::render(const Body& body) {
  RenderBudget budget;
  std::string out;
  exec(body, out);
  return out;
}

void Evaluator::emit(std::string& out, const std::string& text, int line) {
  if (out.size() + text.size() > kMaxStringBytes) {
    fail_at(line, str_cat("the rendered text would be ", out.size() + text.size(), " bytes, over the limit of ",
                          kMaxStringBytes, " bytes"));
  }
  RenderBudget::text(text.size());
  out += text;
}

Value Evaluator::lookup(const std::string& name) const {
  for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope) {
    for (auto it = scope->rbegin(); it != scope->rend(); ++it) {
      if (it->first == name) return it->second;
    }
  }
  return Value();
}

void Evaluator::assign(const std::string& name, Value value) {
  for (auto& [k, v] : scopes_.back()) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  scopes_.back().emplace_back(name, std::move(value));
}

Evaluator::Flow Evaluator::exec(const Body& body, std::string& out) {
  for (const auto& stmt : body) {
    Flow flow = exec(*stmt, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::exec(const Stmt& s, std::string& out) {
  Nested nested(*this, s.line);
  switch (s.kind) {
    case Stmt::Kind::kText: emit(out, s.text, s.line); return Flow::kNormal;
    case Stmt::Kind::kOutput: {
      Value value = eval(*s.expr);
      emit(out, value.is_string() ? value.as_string() : at_line(s.line, [&] { return value.str(); }), s.line);
      return Flow::kNormal;
    }
    case Stmt::Kind::kIf:
      for (const auto& [condition, body] : s.branches) {
        if (eval(*condition).truthy()) return exec(body, out);
      }
      return exec(s.else_body, out);
    case Stmt::Kind::kFor: return exec_for(s, out);
    case Stmt::Kind::kSet: {
      Value value = eval(*s.expr);
      if (!s.attr.empty()) {
        Value target = lookup(s.targets[0]);
        if (!target.is_namespace()) {
          fail_at(s.line, str_cat("cannot set '", s.targets[0], ".", s.attr, "': '", s.targets[0],
                                  "' is not a namespace()"));
        }
        at_line(s.line, [&] { target.set_attribute(s.attr, std::move(value)); });
      } else if (s.targets.size() == 1) {
        assign(s.targets[0], std::move(value));
      } else {
        std::vector<Value> items = at_line(s.line, [&] { return iterate(value); });
        if (items.size() != s.targets.size()) {
          fail_at(s.line, str_cat("cannot unpack ", items.size(), " values into ", s.targets.size(), " names"));
        }
        for (std::size_t i = 0; i < items.size(); ++i) assign(s.targets[i], items[i]);
      }
      return Flow::kNormal;
    }
    case Stmt::Kind::kSetBlock: {
      std::string captured;
      exec(s.body, captured);
      assign(s.targets[0], Value::string(std::move(captured)));
      return Flow::kNormal;
    }
    case Stmt::Kind::kMacro: {
      auto def = std::make_shared<MacroDef>(MacroDef{s.name, &s.params, &s.body});
      assign(s.name, Value::macro(std::move(def)));
      return Flow::kNormal;
    }
    case Stmt::Kind::kBreak: return Flow::kBreak;
    case Stmt::Kind::kContinue: return Flow::kContinue;
  }
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::exec_for(const Stmt& s, std::string& out) {
  Value iterable = eval(*s.expr);
  if (iterable.is_none()) fail_at(s.line, "cannot loop over none");
  std::vector<Value> items = at_line(s.line, [&] { return iterate(iterable); });
  scopes_.emplace_back();
  auto bind = [&](const Value& item) {
    if (s.targets.size() == 1) {
      assign(s.targets[0], item);
      return;
    }
    std::vector<Value> parts = at_line(s.line, [&] { return iterate(item); });
    if (parts.size() != s.targets.size()) {
      fail_at(s.line, str_cat("cannot unpack ", parts.size(), " values into ", s.targets.size(), " loop variables"));
    }
    for (std::size_t i = 0; i < parts.size(); ++i) assign(s.targets[i], parts[i]);
  };
  if (s.condition) {
    std::vector<Value> kept;
    for (const auto& item : items) {
      bind(item);
      if (eval(*s.condition).truthy()) kept.push_back(item);
    }
    items.swap(kept);
  }
  const auto n = static_cast<std::int64_t>(items.size());
  for (std::int64_t i = 0; i < n; ++i) {
    RenderBudget::steps();  // an empty body is still an iteration
    bind(items[static_cast<std::size_t>(i)]);
    Value loop = Value::dict({
        {"index", Value::integer(i + 1)},
        {"index0", Value::integer(i)},
        {"revindex", Value::integer(n - i)},
        {"revindex0", Value::integer(n - i - 1)},
        {"first", Value::boolean(i == 0)},
        {"last", Value::boolean(i == n - 1)},
        {"length", Value::integer(n)},
        {"depth", Value::integer(1)},
        {"depth0", Value::integer(0)},
        {"previtem", i > 0 ? items[static_cast<std::size_t>(i - 1)] : Value()},
        {"nextitem", i + 1 < n ? items[static_cast<std::size_t>(i + 1)] : Value()},
    });
    assign("loop", loop);
    if (exec(s.body, out) == Flow::kBreak) break;
  }
  scopes_.pop_back();
  if (n == 0) return exec(s.else_body, out);
  return Flow::kNormal;
}

Value Evaluator::eval(const Expr& e) {
  Nested nested(*this, e.line);
  switch (e.kind) {
    case Expr::Kind::kLiteral: return e.literal;
    case Expr::Kind::kName: return lookup(e.name);
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      Value::List items;
      for (const auto& c : e.children) items.push_back(eval(*c));
      return at_line(e.line, [&] { return Value::list(std::move(items)); });
    }
    case Expr::Kind::kDict: {
      Value::Dict items;
      for (std::size_t i = 0; i + 1 < e.children.size(); i += 2) {
        Value key = eval(*e.children[i]);
        if (!key.is_string()) fail_at(e.line, str_cat("dict keys must be strings, got ", key.type_name()));
        Value::put(items, key.as_string(), eval(*e.children[i + 1]));
      }
      return at_line(e.line, [&] { return Value::dict(std::move(items)); });
    }
    case Expr::Kind::kGetAttr: {
      Value object = eval(*e.children[0]);
      return at_line(e.line, [&] { return get_attribute(object, e.name); });
    }
    case Expr::Kind::kGetItem: {
      Value object = eval(*e.children[0]);
      Value key = eval(*e.children[1]);
      return at_line(e.line, [&] { return get_item(object, key); });
    }
    case Expr::Kind::kSlice: {
      Value object = eval(*e.children[0]);
      Value parts[3];
      for (int i = 0; i < 3; ++i) {
        if (e.children[i + 1]) parts[i] = eval(*e.children[i + 1]);
      }
      return at_line(e.line, [&] { return slice(object, parts[0], parts[1], parts[2]); });
    }
    case Expr::Kind::kCall: return eval_call(e);
    case Expr::Kind::kFilter: {
      Value operand = eval(*e.children[0]);
      CallArgs args = eval_arguments(e, 1);
      return at_line(e.line, [&] { return apply_filter(e.name, operand, args); });
    }
    case Expr::Kind::kTest: {
      Value operand = eval(*e.children[0]);
      CallArgs args = eval_arguments(e, 1);
      bool result = at_line(e.line, [&] { return apply_test(e.name, operand, args); });
      return Value::boolean(result != e.negated);
    }
    case Expr::Kind::kUnary: {
      Value operand = eval(*e.children[0]);
      if (e.name == "not") return Value::boolean(!operand.truthy());
      if (operand.is_int() || operand.is_bool()) {
        if (e.name != "-") return Value::integer(operand.as_int());
        return at_line(e.line, [&] { return Value::integer(int_negate(operand.as_int(), "unary '-'")); });
      }
      if (operand.is_float()) return Value::floating(e.name == "-" ? -operand.as_number() : operand.as_number());
      fail_at(e.line, str_cat("bad operand type for unary ", e.name, ": ", operand.type_name()));
    }
    case Expr::Kind::kBinary: return eval_binary(e);
    case Expr::Kind::kCondition:
      if (eval(*e.children[1]).truthy()) return eval(*e.children[0]);
      return e.children[2] ? eval(*e.children[2]) : Value();
  }
  return Value();
}

Value Evaluator::eval_binary(const Expr& e) {
  const std::string& op = e.name;
  Value a = eval(*e.children[0]);
  if (op == "and") return a.truthy() ? eval(*e.children[1]) : a;
  if (op == "or") return a.truthy() ? a : eval(*e.children[1]);
  Value b = eval(*e.children[1]);
  if (op == "==") return Value::boolean(a == b);
  if (op == "!=") return Value::boolean(!(a == b));
  if (op == "~") {
    return at_line(e.line, [&] {
      std::string x = a.str(), y = b.str();
      check_string_size(x.size() + y.size(), "'~'");
      return Value::string(x + y);
    });
  }
  if (op == "in" || op == "not in") {
    bool found = at_line(e.line, [&] { return contains(b, a); });
    return Value::boolean(found == (op == "in"));
  }
  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    int c = at_line(e.line, [&] { return compare(a, b); });
    return Value::boolean(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
  }
  auto numeric = [](const Value& v) { return v.is_number() || v.is_bool(); };
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      return at_line(e.line, [&] {
        check_string_size(a.as_string().size() + b.as_string().size(), "'+'");
        return Value::string(a.as_string() + b.as_string());
      });
    }
    if (a.is_list() && b.is_list()) {
      return at_line(e.line, [&] {
        std::size_t n = a.as_list().size() + b.as_list().size();
        check_list_size(n, "'+'");  // before copying; Value::list charges the steps
        Value::List items;
        items.reserve(n);
        items.insert(items.end(), a.as_list().begin(), a.as_list().end());
        items.insert(items.end(), b.as_list().begin(), b.as_list().end());
        return Value::list(std::move(items));
      });
    }
  }
  if (op == "*" && (a.is_string() || b.is_string()) && (a.is_int() || b.is_int())) {
    const std::string& s = (a.is_string() ? a : b).as_string();
    const std::int64_t times = (a.is_int() ? a : b).as_int();
    if (times <= 0 || s.empty()) return Value::string("");
    if (static_cast<std::uint64_t>(times) > kMaxStringBytes / s.size()) {
      fail_at(e.line, str_cat("'*': ", s.size(), " bytes repeated ", times, " times is over the limit of ",
                              kMaxStringBytes, " bytes"));
    }
    std::string out;
    out.reserve(s.size() * static_cast<std::size_t>(times));
    for (std::int64_t i = 0; i < times; ++i) out += s;
    return Value::string(std::move(out));
  }
  if (!numeric(a) || !numeric(b)) {
    fail_at(e.line, str_cat("unsupported operand types for ", op, ": ", a.type_name(), " and ", b.type_name()));
  }
  bool ints = !a.is_float() && !b.is_float();
  double x = a.as_number(), y = b.as_number();
  auto integer = [&] { return at_line(e.line, [&] { return Value::integer(int_arithmetic(op, a.as_int(), b.as_int())); }); };
  if (op == "+") return ints ? integer() : Value::floating(x + y);
  if (op == "-") return ints ? integer() : Value::floating(x - y);
  if (op == "*") return ints ? integer() : Value::floating(x * y);
  if (op == "**") return ints && b.as_int() >= 0 ? integer() : Value::floating(std::pow(x, y));
  if (y == 0) fail_at(e.line, str_cat("division by zero in ", op));
  if (op == "/") return Value::floating(x / y);
  if (op == "//") return ints ? integer() : Value::floating(std::floor(x / y));
  if (op == "%") {
    if (ints) return integer();
    double r = std::fmod(x, y);
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return Value::floating(r);
  }
  fail_at(e.line, str_cat("unsupported operator ", op));
}

CallArgs Evaluator::eval_arguments(const Expr& e, std::size_t first_argument) {
  CallArgs args;
  for (std::size_t i = first_argument; i < e.children.size(); ++i) args.positional.push_back(eval(*e.children[i]));
  for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, eval(*v));
  return args;
}

Value Evaluator::eval_call(const Expr& e) {
  const Expr& callee = *e.children[0];
  CallArgs args = eval_arguments(e, 1);
  if (callee.kind == Expr::Kind::kGetAttr) {
    Value object = eval(*callee.children[0]);
    if (object.is_dict()) {
      const Value* member = object.find(callee.name);
      if (member != nullptr && member->is_macro()) return call_macro(*member->as_macro(), args);
    }
    return at_line(e.line, [&] { return call_method(object, callee.name, args); });
  }
  if (callee.kind == Expr::Kind::kName) {
    Value target = lookup(callee.name);
    if (target.is_macro()) return call_macro(*target.as_macro(), args);
    if (target.is_undefined() && is_global_function(callee.name)) {
      return at_line(e.line, [&] { return call_global(callee.name, args); });
    }
    fail_at(e.line, str_cat("'", callee.name, "' is not callable (unsupported function or undefined name)"));
  }
  fail_at(e.line, "unsupported call expression");
}

Value Evaluator::call_macro(const MacroDef& macro, const CallArgs& args) {
  if (++macro_depth_ > kMaxMacroDepth) {
    throw TemplateError(str_cat("macro '", macro.name, "' nests deeper than ", kMaxMacroDepth, " calls"));
  }
  scopes_.emplace_back();
  const auto& params = *macro.params;
  if (args.positional.size() > params.size()) {
    throw TemplateError(str_cat("macro '", macro.name, "' takes ", params.size(), " arguments, got ", args.positional.size()));
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto& [name, fallback] = params[i];
    Value value = args.get(i, name.c_str());
    if (value.is_undefined() && fallback) value = eval(*fallback);
    assign(name, value);
  }
  std::string out;
  exec(*macro.body, out);
  scopes_.pop_back();
  --macro_depth_;
  return Value::string(std::move(out));
}

}  // namespace baton::jinja
