// Values of the chat-template interpreter: Jinja's dynamic types (undefined, none, bool, int,
// float, string, list, dict, namespace, macro) with Python's semantics for truthiness, equality,
// printing and JSON, since chat templates are written against Python Jinja2 in transformers.
//
// Lists and dicts are shared by reference, as in Python (a namespace mutated inside a loop is seen
// after it). Dicts keep insertion order.
//
// Namespaces are the only values a template can mutate (set_attribute); lists and dicts never
// change once built. A namespace may not hold another namespace, at any depth of the value
// assigned: that rules out reference cycles (which shared_ptr would leak, and printing would
// follow forever), and keeps nesting bounded (kMaxValueDepth, chat_template_limits.h), so the
// recursive printing, comparison and destruction of values cannot exhaust the stack. Every
// container records how deep it nests (depth()); one that would nest deeper than kMaxValueDepth
// is refused when built.
//
// Must not: know about templates' syntax or evaluation; it is only the data model.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"
#include "tokenizer/chat_template_limits.h"

namespace baton::jinja {

// Raised for template errors (unsupported constructs, type errors, raise_exception); turned into
// an absl::Status at the ChatTemplate boundary.
class TemplateError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct MacroDef;  // defined by the evaluator

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kMacro };
  using List = std::vector<Value>;
  using Dict = std::vector<std::pair<std::string, Value>>;

  Value() = default;  // undefined
  static Value none() { Value v; v.kind_ = Kind::kNone; return v; }
  static Value boolean(bool b) { Value v; v.kind_ = Kind::kBool; v.int_ = b; return v; }
  static Value integer(std::int64_t i) { Value v; v.kind_ = Kind::kInt; v.int_ = i; return v; }
  static Value floating(double d) { Value v; v.kind_ = Kind::kFloat; v.float_ = d; return v; }
  static Value string(std::string s) {
    RenderBudget::new_string(s.size());
    Value v;
    v.kind_ = Kind::kString;
    v.string_ = std::make_shared<const std::string>(std::move(s));
    return v;
  }
  // Throw TemplateError when the items nest deeper than kMaxValueDepth, or (a namespace) hold a
  // namespace. Keys of `items` must be unique (put() keeps them so).
  static Value list(List items = {});
  static Value dict(Dict items = {}, bool is_namespace = false);
  static Value macro(std::shared_ptr<const MacroDef> def) {
    Value v;
    v.kind_ = Kind::kMacro;
    v.macro_ = std::move(def);
    return v;
  }
  // Throws TemplateError for JSON nested deeper than kMaxValueDepth. Dicts keep the object's order
  // (an ordered_json keeps the order it was written in, as Python's json.loads does).
  static Value from_json(const nlohmann::ordered_json& j);
  // Insert or overwrite `key` in items being built for dict(), keeping the position of an
  // existing key.
  static void put(Dict& items, const std::string& key, Value value);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kDict && is_namespace_; }
  bool is_macro() const { return kind_ == Kind::kMacro; }

  bool as_bool() const { return int_ != 0; }
  std::int64_t as_int() const { return int_; }
  double as_number() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& as_string() const { return *string_; }
  List& as_list() const { return *list_; }
  Dict& as_dict() const { return *dict_; }
  const std::shared_ptr<const MacroDef>& as_macro() const { return macro_; }

  // Dict lookup; nullptr when absent.
  const Value* find(std::string_view key) const;
  // `{% set ns.key = value %}` on a namespace: insert or overwrite, keeping the original position
  // of an existing key. Throws TemplateError when `value` holds a namespace (this one or any
  // other, at any depth) or would nest the namespace deeper than kMaxValueDepth.
  void set_attribute(const std::string& key, Value value) const;
  // Levels of lists / dicts below and including this value: 0 for scalars, 1 for [1, 2], 2 for
  // [[1]]. A namespace's is the depth it had when created; what set_attribute stores later nests
  // at most kMaxValueDepth more.
  int depth() const { return depth_; }

  bool truthy() const;
  // str(value) as Python Jinja2 prints it: None -> "None", True -> "True", 1.0 -> "1.0",
  // undefined -> "", lists/dicts as Python reprs.
  std::string str() const;
  std::string repr() const;
  // json.dumps(value, ensure_ascii=False, indent=indent) as transformers' tojson filter.
  std::string to_json(int indent = -1, bool sort_keys = false) const;
  std::string type_name() const;

  friend bool operator==(const Value& a, const Value& b);

 private:
  void repr_into(std::string& out) const;
  void dump_json(std::string& out, std::int64_t indent, int depth, bool sort_keys) const;
  static Value from_json(const nlohmann::ordered_json& j, int depth);

  Kind kind_ = Kind::kUndefined;
  bool is_namespace_ = false;
  int depth_ = 0;
  std::int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<const std::string> string_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const MacroDef> macro_;
};

// Python's float repr (shortest round-trip digits, "1.0", "1e-05", "inf", "nan").
std::string python_float_repr(double d);

}  // namespace baton::jinja
