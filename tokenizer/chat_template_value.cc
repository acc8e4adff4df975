#include "tokenizer/chat_template_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace baton::jinja {

Value Value::from_json(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return none();
    case nlohmann::json::value_t::boolean: return boolean(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return integer(j.get<std::int64_t>());
    case nlohmann::json::value_t::number_unsigned: return integer(static_cast<std::int64_t>(j.get<std::uint64_t>()));
    case nlohmann::json::value_t::number_float: return floating(j.get<double>());
    case nlohmann::json::value_t::string: return string(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Dict items;
      for (auto it = j.begin(); it != j.end(); ++it) items.emplace_back(it.key(), from_json(it.value()));
      return dict(std::move(items));
    }
    default: return Value();
  }
}

const Value* Value::find(std::string_view key) const {
  if (kind_ != Kind::kDict) return nullptr;
  for (const auto& [k, v] : *dict_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Value::set(const std::string& key, Value value) const {
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
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return int_ ? "True" : "False";
    case Kind::kInt: return std::to_string(int_);
    case Kind::kFloat: return python_float_repr(float_);
    case Kind::kString: return python_string_repr(*string_);
    case Kind::kList: {
      std::string out = "[";
      for (std::size_t i = 0; i < list_->size(); ++i) {
        if (i > 0) out += ", ";
        out += (*list_)[i].repr();
      }
      return out + "]";
    }
    case Kind::kDict: {
      std::string out = is_namespace_ ? "<Namespace {" : "{";
      for (std::size_t i = 0; i < dict_->size(); ++i) {
        if (i > 0) out += ", ";
        out += python_string_repr((*dict_)[i].first) + ": " + (*dict_)[i].second.repr();
      }
      return out + (is_namespace_ ? "}>" : "}");
    }
    case Kind::kMacro: return "<macro>";
  }
  return "";
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

void Value::dump_json(std::string& out, int indent, int depth, bool sort_keys) const {
  auto newline = [&](int d) {
    out.push_back('\n');
    out.append(static_cast<std::size_t>(indent * d), ' ');
  };
  const char* item_sep = indent >= 0 ? "," : ", ";
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: out += "null"; return;
    case Kind::kBool: out += int_ ? "true" : "false"; return;
    case Kind::kInt: out += std::to_string(int_); return;
    case Kind::kFloat: out += python_float_repr(float_); return;
    case Kind::kString: json_string(out, *string_); return;
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
      }
      if (indent >= 0) newline(depth);
      out.push_back('}');
      return;
    }
  }
}

std::string Value::to_json(int indent, bool sort_keys) const {
  std::string out;
  dump_json(out, indent, 0, sort_keys);
  return out;
}

bool operator==(const Value& a, const Value& b) {
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
