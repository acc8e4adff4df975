#include "tokenizer/chat_template_builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include "common/status.h"
#include "tokenizer/chat_template_arithmetic.h"
#include "tokenizer/chat_template_limits.h"
#include "tokenizer/chat_template_strings.h"
#include "tokenizer/unicode.h"

namespace baton::jinja {

Value CallArgs::get(std::size_t index, const char* name, Value fallback) const {
  if (index < positional.size()) return positional[index];
  for (const auto& [k, v] : keyword) {
    if (k == name) return v;
  }
  return fallback;
}

namespace {

std::int64_t to_index(const Value& v, const char* what) {
  if (!v.is_int() && !v.is_bool()) throw TemplateError(str_cat(what, ": expected an integer, got ", v.type_name()));
  return v.as_int();
}

Value list_value(std::vector<Value> items) { return Value::list(std::move(items)); }

// Number of code points of well-formed UTF-8: the bytes that do not continue a sequence.
std::int64_t count_code_points(const std::string& s) {
  RenderBudget::text(s.size());
  std::int64_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// join's text, checked against kMaxStringBytes as it grows.
void append_checked(std::string& out, const std::string& piece, const char* what) {
  check_string_size(out.size() + piece.size(), what);
  out += piece;
}

// Positional arguments from `from` on, as a CallArgs (for map/select forwarding).
CallArgs rest_of(const CallArgs& args, std::size_t from) {
  CallArgs rest;
  for (std::size_t i = from; i < args.positional.size(); ++i) rest.positional.push_back(args.positional[i]);
  rest.keyword = args.keyword;
  return rest;
}

Value attribute_path(const Value& item, const Value& attribute) {
  if (attribute.is_int()) return get_item(item, attribute);
  Value current = item;
  std::string path = attribute.str();
  std::size_t start = 0;
  while (true) {
    std::size_t dot = path.find('.', start);
    current = get_attribute(current, path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

}  // namespace

std::vector<Value> iterate(const Value& v) {
  if (v.is_list()) {
    RenderBudget::steps(v.as_list().size());
    return v.as_list();
  }
  if (v.is_dict()) {
    RenderBudget::steps(v.as_dict().size());
    std::vector<Value> keys;
    for (const auto& [k, unused] : v.as_dict()) keys.push_back(Value::string(k));
    return keys;
  }
  if (v.is_string()) {
    std::vector<Value> chars;
    for (auto& cp : code_points(v.as_string())) chars.push_back(Value::string(std::move(cp)));
    return chars;
  }
  if (v.is_undefined()) return {};
  throw TemplateError(str_cat("cannot iterate over a value of type ", v.type_name()));
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) throw TemplateError(str_cat("'in <string>' needs a string, got ", item.type_name()));
    RenderBudget::text(container.as_string().size());
    return find_text(container.as_string(), item.as_string(), 0) != std::string::npos;
  }
  if (container.is_dict()) return item.is_string() && container.find(item.as_string()) != nullptr;
  if (container.is_list()) {
    for (const auto& v : container.as_list()) {
      if (v == item) return true;
    }
    return false;
  }
  if (container.is_undefined()) return false;
  throw TemplateError(str_cat("'in' needs a string, list or dict on the right, got ", container.type_name()));
}

int compare(const Value& a, const Value& b) {
  RenderBudget::steps();  // lists compare element by element
  if ((a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool())) {
    return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;  // exact past 2^53
  }
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) {
    double x = a.as_number(), y = b.as_number();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) return a.as_string().compare(b.as_string()) < 0 ? -1 : a.as_string() == b.as_string() ? 0 : 1;
  if (a.is_list() && b.is_list()) {
    const auto &x = a.as_list(), &y = b.as_list();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (int c = compare(x[i], y[i]); c != 0) return c;
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  throw TemplateError(str_cat("cannot compare ", a.type_name(), " with ", b.type_name()));
}

Value get_attribute(const Value& object, const std::string& name) {
  if (object.is_undefined()) throw TemplateError(str_cat("cannot read attribute '", name, "' of an undefined value"));
  if (object.is_dict()) {
    const Value* v = object.find(name);
    return v ? *v : Value();
  }
  return Value();
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) throw TemplateError(str_cat("cannot index an undefined value with ", key.repr()));
  if (object.is_dict()) {
    if (!key.is_string()) return Value();
    const Value* v = object.find(key.as_string());
    return v ? *v : Value();
  }
  if (object.is_list()) {
    if (!key.is_int()) return Value();
    const std::vector<Value>& items = object.as_list();
    std::int64_t i = key.as_int(), n = static_cast<std::int64_t>(items.size());
    if (i < 0) i += n;
    return i < 0 || i >= n ? Value() : items[static_cast<std::size_t>(i)];
  }
  if (object.is_string()) {
    // The i-th code point, without splitting the whole string into one value per character.
    if (!key.is_int()) return Value();
    const std::string& s = object.as_string();
    std::int64_t i = key.as_int(), n = count_code_points(s);
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value();
    std::size_t pos = 0;
    for (std::int64_t k = 0; k < i; ++k) unicode::next_code_point(s, pos);
    std::size_t start = pos;
    unicode::next_code_point(s, pos);
    return Value::string(s.substr(start, pos - start));
  }
  return Value();
}

Value slice(const Value& object, const Value& start_v, const Value& stop_v, const Value& step_v) {
  if (!object.is_list() && !object.is_string()) throw TemplateError(str_cat("cannot slice a ", object.type_name()));
  std::vector<Value> items = iterate(object);
  auto n = static_cast<std::int64_t>(items.size());
  std::int64_t step = step_v.is_undefined() || step_v.is_none() ? 1 : to_index(step_v, "slice step");
  if (step == 0) throw TemplateError("slice step cannot be zero");
  auto bound = [&](const Value& v, std::int64_t fallback) {
    if (v.is_undefined() || v.is_none()) return fallback;
    std::int64_t i = to_index(v, "slice index");
    if (i < 0) i += n;
    return step > 0 ? std::clamp<std::int64_t>(i, 0, n) : std::clamp<std::int64_t>(i, -1, n - 1);
  };
  std::int64_t start = bound(start_v, step > 0 ? 0 : n - 1), stop = bound(stop_v, step > 0 ? n : -1);
  std::vector<Value> out;
  // start and stop lie in [-1, n]; the step may be anything, so stop before i + step overflows.
  for (std::int64_t i = start; step > 0 ? i < stop : i > stop;) {
    out.push_back(items[static_cast<std::size_t>(i)]);
    if (step > 0 ? step >= stop - i : step <= stop - i) break;
    i += step;
  }
  if (object.is_list()) return list_value(std::move(out));
  std::string s;
  for (const auto& c : out) s += c.as_string();
  return Value::string(s);
}

Value call_method(const Value& object, const std::string& name, const CallArgs& args) {
  if (object.is_string()) return call_string_method(object.as_string(), name, args);
  if (object.is_dict() && !object.is_namespace()) {
    if (name == "items") {
      std::vector<Value> items;
      for (const auto& [k, v] : object.as_dict()) items.push_back(list_value({Value::string(k), v}));
      return list_value(std::move(items));
    }
    if (name == "keys") return list_value(iterate(object));
    if (name == "values") {
      std::vector<Value> values;
      for (const auto& [k, v] : object.as_dict()) values.push_back(v);
      return list_value(std::move(values));
    }
    if (name == "get") {
      Value key = args.get(0, "key");
      const Value* v = key.is_string() ? object.find(key.as_string()) : nullptr;
      return v ? *v : args.get(1, "default", Value::none());
    }
  }
  throw TemplateError(str_cat("unsupported method '", name, "' on a ", object.type_name()));
}

bool apply_test(const std::string& name, const Value& v, const CallArgs& args) {
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string();
  if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string();
  if (name == "callable") return v.is_macro();
  if (name == "odd" || name == "even") return v.is_int() && (v.as_int() % 2 != 0) == (name == "odd");
  if (name == "divisibleby") {
    std::int64_t num = to_index(args.get(0, "num"), "divisibleby");
    if (num == 0) throw TemplateError("divisibleby: division by zero");
    return v.is_int() && int_arithmetic("%", v.as_int(), num) == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==" || name == "sameas") return v == args.get(0, "other");
  if (name == "ne" || name == "!=") return !(v == args.get(0, "other"));
  if (name == "lt" || name == "<" || name == "lessthan") return compare(v, args.get(0, "other")) < 0;
  if (name == "gt" || name == ">" || name == "greaterthan") return compare(v, args.get(0, "other")) > 0;
  if (name == "le" || name == "<=") return compare(v, args.get(0, "other")) <= 0;
  if (name == "ge" || name == ">=") return compare(v, args.get(0, "other")) >= 0;
  if (name == "in") return contains(args.get(0, "seq"), v);
  if (name == "lower") return v.is_string() && python_lower(v.as_string()) == v.as_string();
  if (name == "upper") return v.is_string() && python_upper(v.as_string()) == v.as_string();
  throw TemplateError(str_cat("unsupported test 'is ", name, "'"));
}

Value apply_filter(const std::string& name, const Value& v, const CallArgs& args) {
  auto need_string = [&]() -> const std::string& {
    if (!v.is_string()) throw TemplateError(str_cat("filter '", name, "' needs a string, got ", v.type_name()));
    return v.as_string();
  };
  if (name == "trim") return Value::string(python_strip(need_string(), args.get(0, "chars"), true, true));
  if (name == "tojson") {
    Value indent = args.get(0, "indent");
    Value sort_keys = args.get(1, "sort_keys", Value::boolean(false));
    std::int64_t width = indent.is_int() ? indent.as_int() : -1;
    if (width > 0) check_string_size(static_cast<std::uint64_t>(width), "filter 'tojson' indent");
    return Value::string(v.to_json(width < 0 ? -1 : static_cast<int>(width), sort_keys.truthy()));
  }
  if (name == "length" || name == "count") {
    if (v.is_string()) return Value::integer(count_code_points(v.as_string()));
    if (v.is_list()) return Value::integer(static_cast<std::int64_t>(v.as_list().size()));
    if (v.is_dict()) return Value::integer(static_cast<std::int64_t>(v.as_dict().size()));
    if (v.is_undefined()) return Value::integer(0);
    throw TemplateError(str_cat("filter 'length' needs a string, list or dict, got ", v.type_name()));
  }
  if (name == "upper") return Value::string(python_upper(v.str()));
  if (name == "lower") return Value::string(python_lower(v.str()));
  if (name == "title") return Value::string(python_title(v.str()));
  if (name == "capitalize") return Value::string(python_capitalize(v.str()));
  if (name == "first" || name == "last") {
    std::vector<Value> items = iterate(v);
    if (items.empty()) return Value();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    Value attribute = args.get(1, "attribute");
    std::string sep = args.get(0, "d", Value::string("")).str(), out;
    bool first = true;
    for (const auto& item : iterate(v)) {
      if (!first) append_checked(out, sep, "filter 'join'");
      append_checked(out, (attribute.is_undefined() ? item : attribute_path(item, attribute)).str(), "filter 'join'");
      first = false;
    }
    return Value::string(out);
  }
  if (name == "default" || name == "d") {
    bool boolean = args.get(1, "boolean", Value::boolean(false)).truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return args.get(0, "default_value", Value::string(""));
    return v;
  }
  if (name == "string") return Value::string(v.str());
  if (name == "safe") return v;
  if (name == "escape" || name == "e") return Value::string(html_escape(v.str()));
  if (name == "int") {
    if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
    if (v.is_float()) {
      // Jinja2: int(nan) is a ValueError, which gives the default; int(inf) an OverflowError.
      if (std::isnan(v.as_number())) return args.get(0, "default", Value::integer(0));
      return Value::integer(float_to_int(v.as_number(), "filter 'int'"));
    }
    try {
      return Value::integer(std::stoll(v.str()));
    } catch (...) {
      return args.get(0, "default", Value::integer(0));
    }
  }
  if (name == "float") {
    if (v.is_number() || v.is_bool()) return Value::floating(v.as_number());
    try {
      return Value::floating(std::stod(v.str()));
    } catch (...) {
      return args.get(0, "default", Value::floating(0));
    }
  }
  if (name == "abs") {
    if (v.is_int()) return Value::integer(v.as_int() < 0 ? int_negate(v.as_int(), "filter 'abs'") : v.as_int());
    if (v.is_float()) return Value::floating(std::fabs(v.as_number()));
    throw TemplateError(str_cat("filter 'abs' needs a number, got ", v.type_name()));
  }
  if (name == "round") {
    double scale = std::pow(10.0, static_cast<double>(args.get(0, "precision", Value::integer(0)).as_int()));
    std::string method = args.get(1, "method", Value::string("common")).str();
    double x = v.as_number() * scale;
    x = method == "floor" ? std::floor(x) : method == "ceil" ? std::ceil(x) : std::round(x);
    return Value::floating(x / scale);
  }
  if (name == "list") return list_value(iterate(v));
  if (name == "items") return call_method(v, "items", {});
  if (name == "reverse") {
    if (v.is_string()) {
      std::vector<std::string> cps = code_points(v.as_string());
      std::string out;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
      return Value::string(out);
    }
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    return list_value(std::move(items));
  }
  if (name == "sort" || name == "dictsort") {
    std::vector<Value> items = name == "dictsort" ? call_method(v, "items", {}).as_list() : iterate(v);
    bool reverse = args.get(name == "sort" ? 0 : 2, "reverse", Value::boolean(false)).truthy();
    Value attribute = name == "dictsort"
                          ? Value::integer(args.get(1, "by", Value::string("key")).str() == "value" ? 1 : 0)
                          : args.get(2, "attribute");
    auto key = [&](const Value& item) {
      Value k = attribute.is_undefined() ? item : attribute_path(item, attribute);
      return k.is_string() ? Value::string(python_lower(k.as_string())) : k;  // case-insensitive by default
    };
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
      int c = compare(key(a), key(b));
      return reverse ? c > 0 : c < 0;
    });
    return list_value(std::move(items));
  }
  if (name == "unique") {
    std::vector<Value> out;
    for (const auto& item : iterate(v)) {
      if (std::none_of(out.begin(), out.end(), [&](const Value& o) { return o == item; })) out.push_back(item);
    }
    return list_value(std::move(out));
  }
  if (name == "map") {
    std::vector<Value> out;
    Value attribute = args.get(99, "attribute");
    for (const auto& item : iterate(v)) {
      if (!attribute.is_undefined()) {
        Value mapped = attribute_path(item, attribute);
        out.push_back(mapped.is_undefined() ? args.get(99, "default") : mapped);
      } else {
        if (args.positional.empty()) throw TemplateError("filter 'map' needs a filter name or attribute=");
        out.push_back(apply_filter(args.positional[0].str(), item, rest_of(args, 1)));
      }
    }
    return list_value(std::move(out));
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    bool by_attribute = name.ends_with("attr");
    bool keep_when = name.starts_with("select");
    std::size_t test_index = by_attribute ? 1 : 0;
    std::vector<Value> out;
    for (const auto& item : iterate(v)) {
      Value subject = by_attribute ? attribute_path(item, args.get(0, "attribute")) : item;
      bool passed = args.positional.size() > test_index
                        ? apply_test(args.positional[test_index].str(), subject, rest_of(args, test_index + 1))
                        : subject.truthy();
      if (passed == keep_when) out.push_back(item);
    }
    return list_value(std::move(out));
  }
  if (name == "replace") {
    Value count = args.get(2, "count", Value::integer(-1));
    return Value::string(python_replace(v.str(), args.get(0, "old").str(), args.get(1, "new").str(),
                                        count.is_none() ? -1 : count.as_int()));
  }
  if (name == "indent") {
    Value width_v = args.get(0, "width", Value::integer(4));
    std::string pad;
    if (width_v.is_string()) {
      pad = width_v.as_string();
    } else {
      std::int64_t width = width_v.as_int();  // ' ' * width: empty when negative, as Python
      if (width > 0) check_string_size(static_cast<std::uint64_t>(width), "filter 'indent' width");
      pad.assign(static_cast<std::size_t>(std::max<std::int64_t>(width, 0)), ' ');
    }
    bool first = args.get(1, "first", Value::boolean(false)).truthy();
    bool blank = args.get(2, "blank", Value::boolean(false)).truthy();
    std::vector<std::string> lines = python_split(v.str(), Value::string("\n"), -1);
    // At most one pad per line: check the whole result before building it.
    if (!pad.empty()) {
      std::size_t text = 0;
      for (const auto& line : lines) text += line.size() + 1;
      if (lines.size() > (kMaxStringBytes + 1) / pad.size() + 1 || text + lines.size() * pad.size() > kMaxStringBytes + 1) {
        throw TemplateError(str_cat("filter 'indent': ", lines.size(), " lines indented by ", pad.size(),
                                    " bytes are over the limit of ", kMaxStringBytes, " bytes"));
      }
    }
    std::string out;
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) out += "\n";
      if ((i > 0 || first) && (blank || !lines[i].empty())) out += pad;
      out += lines[i];
    }
    return Value::string(out);
  }
  if (name == "wordcount") return Value::integer(static_cast<std::int64_t>(python_split(v.str(), Value(), -1).size()));
  if (name == "sum") {
    Value total = args.get(1, "start", Value::integer(0));
    for (const auto& item : iterate(v)) {
      total = total.is_int() && item.is_int() ? Value::integer(int_arithmetic("+", total.as_int(), item.as_int()))
                                              : Value::floating(total.as_number() + item.as_number());
    }
    return total;
  }
  if (name == "min" || name == "max") {
    std::vector<Value> items = iterate(v);
    if (items.empty()) return Value();
    auto best = items.front();
    for (const auto& item : items) {
      if ((name == "min") == (compare(item, best) < 0) && !(item == best)) best = item;
    }
    return best;
  }
  throw TemplateError(str_cat("unsupported filter '", name, "'"));
}

bool is_global_function(const std::string& name) {
  return name == "namespace" || name == "raise_exception" || name == "range" || name == "dict" ||
         name == "strftime_now";
}

Value call_global(const std::string& name, const CallArgs& args) {
  if (name == "namespace" || name == "dict") {
    Value::Dict items;
    if (!args.positional.empty()) {
      if (!args.positional[0].is_dict()) throw TemplateError(str_cat(name, "(): positional argument must be a dict"));
      items = args.positional[0].as_dict();
    }
    for (const auto& [k, val] : args.keyword) Value::put(items, k, val);
    return Value::dict(std::move(items), name == "namespace");
  }
  if (name == "raise_exception") throw TemplateError(str_cat("raise_exception: ", args.get(0, "message").str()));
  if (name == "range") {
    std::int64_t start = 0, stop, step = 1;
    if (args.positional.size() == 1) {
      stop = to_index(args.positional[0], "range");
    } else if (args.positional.size() >= 2) {
      start = to_index(args.positional[0], "range");
      stop = to_index(args.positional[1], "range");
      if (args.positional.size() >= 3) step = to_index(args.positional[2], "range");
    } else {
      throw TemplateError("range() needs 1 to 3 integers");
    }
    if (step == 0) throw TemplateError("range() step cannot be zero");
    // The length first, in unsigned arithmetic (stop - start and -step may not fit in int64); the
    // items as start + i * step modulo 2^64, which is exact since each lies between start and stop.
    const auto ustart = static_cast<std::uint64_t>(start), ustop = static_cast<std::uint64_t>(stop);
    std::uint64_t count = 0;
    if (step > 0 && start < stop) count = (ustop - ustart - 1) / static_cast<std::uint64_t>(step) + 1;
    if (step < 0 && start > stop) count = (ustart - ustop - 1) / (std::uint64_t{0} - static_cast<std::uint64_t>(step)) + 1;
    if (count > static_cast<std::uint64_t>(kMaxRangeItems)) {
      throw TemplateError(str_cat("range(", start, ", ", stop, ", ", step, ") has ", count, " items, over the limit of ",
                                  kMaxRangeItems));
    }
    RenderBudget::steps(count);
    std::vector<Value> out;
    out.reserve(count);
    for (std::uint64_t i = 0; i < count; ++i) {
      out.push_back(Value::integer(static_cast<std::int64_t>(ustart + i * static_cast<std::uint64_t>(step))));
    }
    return list_value(std::move(out));
  }
  if (name == "strftime_now") {
    std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[256];
    std::size_t n = std::strftime(buf, sizeof(buf), args.get(0, "format").str().c_str(), &local);
    return Value::string(std::string(buf, n));
  }
  throw TemplateError(str_cat("unsupported function '", name, "()'"));
}

}  // namespace baton::jinja
