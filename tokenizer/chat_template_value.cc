#include "tokenizer/chat_template_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <unordered_set>

#include "common/status.h"

namespace baton::jinja {

namespace {

[[noreturn]] void too_deep() {
  throw TemplateError(str_cat("values nest deeper than ", kMaxValueDepth, " levels of lists and dicts"));
}

// Whether `v` is or holds a namespace; `seen` skips containers already walked (values may share
// them, so a walk without it could take exponential time).
bool holds_namespace(const Value& v, std::unordered_set<const void*>& seen) {
  if (v.is_namespace()) return true;
  if (v.is_list()) {
    if (!seen.insert(&v.as_list()).second) return false;
    RenderBudget::steps(v.as_list().size());
    for (const auto& item : v.as_list()) {
      if (holds_namespace(item, seen)) return true;
    }
  } else if (v.is_dict()) {
    if (!seen.insert(&v.as_dict()).second) return false;
    RenderBudget::steps(v.as_dict().size());
    for (const auto& [k, item] : v.as_dict()) {
      if (holds_namespace(item, seen)) return true;
    }
  }
  return false;
}

void check_namespace_member(const std::string& key, const Value& value) {
  std::unordered_set<const void*> seen;
  if (holds_namespace(value, seen)) {
    throw TemplateError(str_cat("cannot store a namespace in a namespace (attribute '", key,
                                "'): namespaces may not nest or refer to themselves"));
  }
}

}  // namespace

Value Value::list(List items) {
  RenderBudget::steps(items.size());  // every list built during a render: split(), map, '+', ...
  Value v;
  v.kind_ = Kind::kList;
  for (const auto& item : items) v.depth_ = std::max(v.depth_, item.depth_);
  if (++v.depth_ > kMaxValueDepth) too_deep();
  v.list_ = std::make_shared<List>(std::move(items));
  return v;
}

Value Value::dict(Dict items, bool is_namespace) {
  RenderBudget::steps(items.size());
  Value v;
  v.kind_ = Kind::kDict;
  for (const auto& [k, item] : items) {
    if (is_namespace) check_namespace_member(k, item);
    v.depth_ = std::max(v.depth_, item.depth_);
  }
  if (++v.depth_ > kMaxValueDepth) too_deep();
  v.dict_ = std::make_shared<Dict>(std::move(items));
  v.is_namespace_ = is_namespace;
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j) { return from_json(j, 0); }

Value Value::from_json(const nlohmann::ordered_json& j, int depth) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return none();
    case nlohmann::json::value_t::boolean: return boolean(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return integer(j.get<std::int64_t>());
    case nlohmann::json::value_t::number_unsigned: return integer(static_cast<std::int64_t>(j.get<std::uint64_t>()));
    case nlohmann::json::value_t::number_float: return floating(j.get<double>());
    case nlohmann::json::value_t::string: return string(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      if (depth >= kMaxValueDepth) too_deep();
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e, depth + 1));
      return list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      if (depth >= kMaxValueDepth) too_deep();
      Dict items;
      for (auto it = j.begin(); it != j.end(); ++it) items.emplace_back(it.key(), from_json(it.value(), depth + 1));
      return dict(std::move(items));
    }
    default: return Value();
  }
}

void Value::put(Dict& items, const std::string& key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

const Value* Value::find(std::string_view key) const {
  if (kind_ != Kind::kDict) return nullptr;
  for (const auto& [k, v] : *dict_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Value::set_attribute(const std::string& key, Value value) const {
  check_namespace_member(key, value);
  if (value.depth_ + 1 > kMaxValueDepth) too_deep();
  for (auto& [k, v] : *dict_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  dict_->emplace_back(key, std::move(value));
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool:
    case Kind::kInt: return int_ != 0;
    case Kind::kFloat: return float_ != 0.0;
    case Kind::kString: return !string_->empty();
    case Kind::kList: return !list_->empty();
    case Kind::kDict: return is_namespace_ || !dict_->empty();
    case Kind::kMacro: return true;
  }
  return false;
}

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  // Shortest round-trip digits, then Python's layout: exponent form outside [1e-4, 1e16).
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, end);
  std::size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  int exponent = std::stoi(sci.substr(e + 1));
  bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits.push_back(c);
  }
  std::string out;
  if (negative) out.push_back('-');
  if (exponent < -4 || exponent >= 16) {
    out.append(digits, 0, 1);
    if (digits.size() > 1) out.append(1, '.').append(digits, 1, std::string::npos);
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out.append(exp);
  }
  if (exponent < 0) {
    return out.append("0.").append(static_cast<std::size_t>(-exponent - 1), '0').append(digits);
  }
  auto int_len = static_cast<std::size_t>(exponent + 1);
  if (digits.size() <= int_len) return out.append(digits).append(int_len - digits.size(), '0').append(".0");
  return out.append(digits, 0, int_len).append(1, '.').append(digits, int_len, std::string::npos);
}

namespace {
std::string python_string_repr(const std::string& s) {
  // Python prefers single quotes unless the string contains ' and no ".
  char quote = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, quote);
  for (char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c == quote) {
          out.push_back('\\');
          out.push_back(c);
        } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned char>(c));
          out += buf;
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back(quote);
  return out;
}
}  // namespace

std::string Value::str() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kString: return *string_;
    default: return repr();
  }
}

std::string Value::repr() const {
  std::string out;
  repr_into(out);
  return out;
}

void Value::repr_into(std::string& out) const {
  // Values may share containers ([l, l]), so what is printed can be far larger than what is held:
  // every element is a step and the text is checked as it grows.
  RenderBudget::steps();
  switch (kind_) {
    case Kind::kUndefined: return;
    case Kind::kNone: out += "None"; return;
    case Kind::kBool: out += int_ ? "True" : "False"; return;
    case Kind::kInt: out += std::to_string(int_); return;
    case Kind::kFloat: out += python_float_repr(float_); return;
    case Kind::kString: out += python_string_repr(*string_); break;
    case Kind::kList: {
      out += "[";
      for (std::size_t i = 0; i < list_->size(); ++i) {
        if (i > 0) out += ", ";
        (*list_)[i].repr_into(out);
      }
      out += "]";
      break;
    }
    case Kind::kDict: {
      out += is_namespace_ ? "<Namespace {" : "{";
      for (std::size_t i = 0; i < dict_->size(); ++i) {
        if (i > 0) out += ", ";
        out += python_string_repr((*dict_)[i].first);
        out += ": ";
        (*dict_)[i].second.repr_into(out);
      }
      out += is_namespace_ ? "}>" : "}";
      break;
    }
    case Kind::kMacro: out += "<macro>"; return;
  }
  check_string_size(out.size(), "printing a value");
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "none";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "string";
    case Kind::kList: return "list";
    case Kind::kDict: return is_namespace_ ? "namespace" : "dict";
    case Kind::kMacro: return "macro";
  }
  return "?";
}

namespace {
void json_string(std::string& out, const std::string& s) {
  out.push_back('"');
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned char>(c));
          out += buf;
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}
}  // namespace

void Value::dump_json(std::string& out, std::int64_t indent, int depth, bool sort_keys) const {
  // As repr_into: shared containers can print far larger than they are.
  RenderBudget::steps();
  auto newline = [&](int d) {
    // indent <= kMaxStringBytes (to_json), d <= 2 * kMaxValueDepth + 1: no overflow.
    auto pad = static_cast<std::size_t>(indent) * static_cast<std::size_t>(d);
    check_string_size(out.size() + 1 + pad, "filter 'tojson'");
    out.push_back('\n');
    out.append(pad, ' ');
  };
  const char* item_sep = indent >= 0 ? "," : ", ";
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: out += "null"; return;
    case Kind::kBool: out += int_ ? "true" : "false"; return;
    case Kind::kInt: out += std::to_string(int_); return;
    case Kind::kFloat: out += python_float_repr(float_); return;
    case Kind::kString:
      json_string(out, *string_);
      check_string_size(out.size(), "filter 'tojson'");
      return;
    case Kind::kMacro: throw TemplateError("tojson: a macro is not JSON serializable");
    case Kind::kList: {
      if (list_->empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (std::size_t i = 0; i < list_->size(); ++i) {
        if (i > 0) out += item_sep;
        if (indent >= 0) newline(depth + 1);
        (*list_)[i].dump_json(out, indent, depth + 1, sort_keys);
        check_string_size(out.size(), "filter 'tojson'");
      }
      if (indent >= 0) newline(depth);
      out.push_back(']');
      return;
    }
    case Kind::kDict: {
      if (dict_->empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& e : *dict_) entries.push_back(&e);
      if (sort_keys) {
        std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return a->first < b->first; });
      }
      out.push_back('{');
      for (std::size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) out += item_sep;
        if (indent >= 0) newline(depth + 1);
        json_string(out, entries[i]->first);
        out += ": ";
        entries[i]->second.dump_json(out, indent, depth + 1, sort_keys);
        check_string_size(out.size(), "filter 'tojson'");
      }
      if (indent >= 0) newline(depth);
      out.push_back('}');
      return;
    }
  }
}

std::string Value::to_json(int indent, bool sort_keys) const {
  std::string out;
  check_string_size(indent < 0 ? 0 : static_cast<std::size_t>(indent), "filter 'tojson' indent");
  dump_json(out, indent, 0, sort_keys);
  return out;
}

bool operator==(const Value& a, const Value& b) {
  RenderBudget::steps();  // lists and dicts compare element by element
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_number() == b.as_number();
    return a.int_ == b.int_;
  }
  if ((a.is_bool() && b.is_number()) || (a.is_number() && b.is_bool())) return a.as_number() == b.as_number();
  if (a.kind_ != b.kind_) return false;
  switch (a.kind_) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kBool: return a.int_ == b.int_;
    case Value::Kind::kString: return *a.string_ == *b.string_;
    case Value::Kind::kList: return *a.list_ == *b.list_;
    case Value::Kind::kDict: {
      if (a.dict_->size() != b.dict_->size()) return false;
      for (const auto& [k, v] : *a.dict_) {
        const Value* other = b.find(k);
        if (other == nullptr || !(*other == v)) return false;
      }
      return true;
    }
    case Value::Kind::kMacro: return a.macro_ == b.macro_;
    default: return false;
  }
}

}  // namespace baton::jinja
