#include "engine/structured/json_grammar.h"

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "nlohmann/json.hpp"

namespace baton::structured {
namespace {

using Json = nlohmann::ordered_json;  // properties are generated in the schema's order

// Keywords that say nothing about which values are valid.
const std::set<std::string>& annotations() {
  static const std::set<std::string> k = {"$schema", "$id",      "$comment",  "title",     "description",
                                          "default", "examples", "deprecated", "readOnly", "writeOnly",
                                          "$defs",   "definitions"};
  return k;
}

// Keywords this compiler turns into grammar.
const std::set<std::string>& supported() {
  static const std::set<std::string> k = {"type",      "properties", "required", "additionalProperties",
                                          "items",     "minItems",   "maxItems", "minLength",
                                          "maxLength", "enum",       "const",    "anyOf",
                                          "oneOf",     "allOf",      "$ref"};
  return k;
}

// A schema's place for messages: its JSON pointer, "/" for the root.
std::string place(const std::string& where) { return where.empty() ? "/" : where; }

// The rules every JSON grammar shares, and the schema compiler on top of them.
class JsonGrammar {
 public:
  explicit JsonGrammar(const Json* root_schema = nullptr) : root_schema_(root_schema) { common(); }

  std::int32_t any_object() const { return any_object_; }
  absl::StatusOr<std::int32_t> compile(const Json& schema, const std::string& where);  // depth-checked
  absl::StatusOr<std::shared_ptr<const Grammar>> build(std::int32_t value) {
    // Optional whitespace around the whole value, as a JSON text allows.
    const std::int32_t root = b_.rule("root");
    b_.add(root, {Symbol::ref(ws_), Symbol::ref(value), Symbol::ref(ws_)});
    return b_.build(root);
  }

 private:
  std::vector<Symbol> seq(std::initializer_list<std::vector<Symbol>> parts) {
    std::vector<Symbol> out;
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  }
  std::vector<Symbol> r(std::int32_t rule) { return {Symbol::ref(rule)}; }

  void common();
  std::int32_t string_of_length(int min, std::optional<int> max);
  std::int32_t array_of(std::int32_t item, int min, std::optional<int> max);
  absl::StatusOr<std::int32_t> object_of(const Json& schema, const std::string& where);
  absl::StatusOr<std::int32_t> of_type(const std::string& type, const Json& schema, const std::string& where);
  absl::StatusOr<std::int32_t> ref(const std::string& target, const std::string& where);
  absl::StatusOr<std::int32_t> compile_node(const Json& schema, const std::string& where);

  GrammarBuilder b_;
  const Json* root_schema_;
  std::map<std::string, std::int32_t> refs_;
  int depth_ = 0;  // compile()'s nesting
  std::int32_t ws_ = -1, value_ = -1, string_ = -1, char_ = -1, number_ = -1, integer_ = -1, boolean_ = -1,
               null_ = -1, any_object_ = -1, any_array_ = -1;
};

void JsonGrammar::common() {
  // ws: at most kMaxWhitespace blanks.
  std::int32_t next = b_.rule("ws" + std::to_string(kMaxWhitespace));
  b_.add(next, {});
  ByteSet blank;
  for (char c : {' ', '\t', '\n', '\r'}) blank.set(static_cast<unsigned char>(c));
  for (int i = kMaxWhitespace - 1; i >= 0; --i) {
    const std::int32_t w = b_.rule("ws" + std::to_string(i));
    b_.add(w, {});
    b_.add(w, {Symbol::set(blank), Symbol::ref(next)});
    next = w;
  }
  ws_ = next;

  // A string's characters: printable ASCII but '"' and '\', escapes, and well-formed UTF-8.
  const std::int32_t cont = b_.rule("utf8-continuation");
  b_.add(cont, {Symbol::range(0x80, 0xBF)});
  const std::int32_t hex = b_.rule("hex");
  ByteSet h;
  for (char c : std::string("0123456789abcdefABCDEF")) h.set(static_cast<unsigned char>(c));
  b_.add(hex, {Symbol::set(h)});
  char_ = b_.rule("char");
  ByteSet plain;
  for (int c = 0x20; c <= 0x7F; ++c) {
    if (c != '"' && c != '\\') plain.set(static_cast<std::size_t>(c));
  }
  b_.add(char_, {Symbol::set(plain)});
  ByteSet escaped;
  for (char c : std::string("\"\\/bfnrt")) escaped.set(static_cast<unsigned char>(c));
  b_.add(char_, {Symbol::byte('\\'), Symbol::set(escaped)});
  b_.add(char_, {Symbol::byte('\\'), Symbol::byte('u'), Symbol::ref(hex), Symbol::ref(hex), Symbol::ref(hex), Symbol::ref(hex)});
  b_.add(char_, {Symbol::range(0xC2, 0xDF), Symbol::ref(cont)});
  b_.add(char_, {Symbol::byte(0xE0), Symbol::range(0xA0, 0xBF), Symbol::ref(cont)});
  ByteSet e1;
  for (int c = 0xE1; c <= 0xEF; ++c) {
    if (c != 0xED) e1.set(static_cast<std::size_t>(c));
  }
  b_.add(char_, {Symbol::set(e1), Symbol::ref(cont), Symbol::ref(cont)});
  b_.add(char_, {Symbol::byte(0xED), Symbol::range(0x80, 0x9F), Symbol::ref(cont)});
  b_.add(char_, {Symbol::byte(0xF0), Symbol::range(0x90, 0xBF), Symbol::ref(cont), Symbol::ref(cont)});
  b_.add(char_, {Symbol::range(0xF1, 0xF3), Symbol::ref(cont), Symbol::ref(cont), Symbol::ref(cont)});
  b_.add(char_, {Symbol::byte(0xF4), Symbol::range(0x80, 0x8F), Symbol::ref(cont), Symbol::ref(cont)});
  const std::int32_t chars = b_.rule("chars");
  b_.add(chars, {});
  b_.add(chars, {Symbol::ref(char_), Symbol::ref(chars)});
  string_ = b_.rule("string");
  b_.add(string_, {Symbol::byte('"'), Symbol::ref(chars), Symbol::byte('"')});

  // Numbers as JSON writes them.
  const std::int32_t digits = b_.rule("digits");
  b_.add(digits, {});
  b_.add(digits, {Symbol::range('0', '9'), Symbol::ref(digits)});
  const std::int32_t minus = b_.rule("minus");
  b_.add(minus, {});
  b_.add(minus, {Symbol::byte('-')});
  const std::int32_t int_part = b_.rule("int");
  b_.add(int_part, {Symbol::byte('0')});
  b_.add(int_part, {Symbol::range('1', '9'), Symbol::ref(digits)});
  integer_ = b_.rule("integer");
  b_.add(integer_, {Symbol::ref(minus), Symbol::ref(int_part)});
  const std::int32_t frac = b_.rule("fraction");
  b_.add(frac, {});
  b_.add(frac, {Symbol::byte('.'), Symbol::range('0', '9'), Symbol::ref(digits)});
  const std::int32_t sign = b_.rule("sign");
  b_.add(sign, {});
  b_.add(sign, {Symbol::byte('+')});
  b_.add(sign, {Symbol::byte('-')});
  const std::int32_t exp = b_.rule("exponent");
  b_.add(exp, {});
  ByteSet e;
  e.set('e');
  e.set('E');
  b_.add(exp, {Symbol::set(e), Symbol::ref(sign), Symbol::range('0', '9'), Symbol::ref(digits)});
  number_ = b_.rule("number");
  b_.add(number_, {Symbol::ref(integer_), Symbol::ref(frac), Symbol::ref(exp)});
  boolean_ = b_.rule("boolean");
  b_.add(boolean_, literal("true"));
  b_.add(boolean_, literal("false"));
  null_ = b_.rule("null");
  b_.add(null_, literal("null"));

  // Any value, object and array.
  value_ = b_.rule("value");
  any_object_ = b_.rule("object");
  any_array_ = b_.rule("array");
  for (std::int32_t v : {any_object_, any_array_, string_, number_, boolean_, null_}) b_.add(value_, {Symbol::ref(v)});
  const std::int32_t member = b_.rule("member");
  b_.add(member, {Symbol::ref(string_), Symbol::ref(ws_), Symbol::byte(':'), Symbol::ref(ws_), Symbol::ref(value_)});
  const std::int32_t members = b_.rule("members");
  b_.add(members, {});
  b_.add(members, seq({literal(","), r(ws_), r(member), r(ws_), r(members)}));
  b_.add(any_object_, seq({literal("{"), r(ws_), literal("}")}));
  b_.add(any_object_, seq({literal("{"), r(ws_), r(member), r(ws_), r(members), literal("}")}));
  const std::int32_t items = b_.rule("items");
  b_.add(items, {});
  b_.add(items, seq({literal(","), r(ws_), r(value_), r(ws_), r(items)}));
  b_.add(any_array_, seq({literal("["), r(ws_), literal("]")}));
  b_.add(any_array_, seq({literal("["), r(ws_), r(value_), r(ws_), r(items), literal("]")}));
}

std::int32_t JsonGrammar::string_of_length(int min, std::optional<int> max) {
  // c[k]: the characters after k of them.
  const int last = max ? *max : min;
  std::vector<std::int32_t> c(static_cast<std::size_t>(last) + 1);
  for (int k = 0; k <= last; ++k) c[static_cast<std::size_t>(k)] = b_.rule("string-chars" + std::to_string(k));
  for (int k = 0; k <= last; ++k) {
    const std::int32_t rule = c[static_cast<std::size_t>(k)];
    if (k == last) {
      if (max) {
        b_.add(rule, {});
      } else {  // at least min: then any number more
        b_.add(rule, {});
        b_.add(rule, {Symbol::ref(char_), Symbol::ref(rule)});
      }
      continue;
    }
    if (k >= min) b_.add(rule, {});
    b_.add(rule, {Symbol::ref(char_), Symbol::ref(c[static_cast<std::size_t>(k) + 1])});
  }
  const std::int32_t s = b_.rule("bounded-string");
  b_.add(s, {Symbol::byte('"'), Symbol::ref(c[0]), Symbol::byte('"')});
  return s;
}

std::int32_t JsonGrammar::array_of(std::int32_t item, int min, std::optional<int> max) {
  // rest[k]: what follows the k-th item.
  const int last = max ? *max : std::max(min, 1);
  std::vector<std::int32_t> rest(static_cast<std::size_t>(last) + 1);
  for (int k = 1; k <= last; ++k) rest[static_cast<std::size_t>(k)] = b_.rule("array-rest" + std::to_string(k));
  for (int k = 1; k <= last; ++k) {
    const std::int32_t rule = rest[static_cast<std::size_t>(k)];
    if (k >= min) b_.add(rule, {});
    if (k < last) {
      b_.add(rule, seq({literal(","), r(ws_), r(item), r(ws_), r(rest[static_cast<std::size_t>(k) + 1])}));
    } else if (!max) {
      b_.add(rule, seq({literal(","), r(ws_), r(item), r(ws_), r(rule)}));
    }
  }
  const std::int32_t a = b_.rule("bounded-array");
  if (min == 0) b_.add(a, seq({literal("["), r(ws_), literal("]")}));
  if (!max || *max >= 1) b_.add(a, seq({literal("["), r(ws_), r(item), r(ws_), r(rest[1]), literal("]")}));
  return a;
}

absl::StatusOr<std::int32_t> JsonGrammar::object_of(const Json& schema, const std::string& where) {
  const Json* props = schema.contains("properties") ? &schema["properties"] : nullptr;
  if (props != nullptr && !props->is_object()) {
    return absl::InvalidArgumentError(str_cat("'properties' at ", place(where), " must be an object"));
  }
  std::set<std::string> required;
  if (schema.contains("required")) {
    const Json& req = schema["required"];
    if (!req.is_array()) return absl::InvalidArgumentError(str_cat("'required' at ", place(where), " must be an array"));
    for (const Json& name : req) {
      if (!name.is_string()) {
        return absl::InvalidArgumentError(str_cat("'required' at ", place(where), " must list property names"));
      }
      required.insert(name.get<std::string>());
    }
  }
  struct Property {
    std::string name;
    std::int32_t rule;
    bool required;
  };
  std::vector<Property> properties;
  if (props != nullptr) {
    for (const auto& [name, sub] : props->items()) {
      BATON_ASSIGN_OR_RETURN(const std::int32_t rule, compile(sub, str_cat(where, "/properties/", name)));
      const std::int32_t p = b_.rule("property " + name);
      b_.add(p, seq({literal(Json(name).dump()), r(ws_), literal(":"), r(ws_), r(rule)}));
      properties.push_back({name, p, required.contains(name)});
    }
  }
  for (const std::string& name : required) {
    if (props == nullptr || !props->contains(name)) {
      return absl::InvalidArgumentError(
          str_cat("'required' at ", place(where), " names '", name, "', which is not in 'properties'"));
    }
  }
  if (properties.empty()) {
    // No properties: any members, their values from additionalProperties when it is a schema.
    const Json* extra = schema.contains("additionalProperties") ? &schema["additionalProperties"] : nullptr;
    if (extra != nullptr && extra->is_boolean() && !extra->get<bool>()) {
      const std::int32_t empty = b_.rule("empty-object");
      b_.add(empty, seq({literal("{"), r(ws_), literal("}")}));
      return empty;
    }
    if (extra == nullptr || extra->is_boolean()) return any_object_;
    BATON_ASSIGN_OR_RETURN(const std::int32_t value, compile(*extra, where + "/additionalProperties"));
    const std::int32_t member = b_.rule("map-member");
    b_.add(member, {Symbol::ref(string_), Symbol::ref(ws_), Symbol::byte(':'), Symbol::ref(ws_), Symbol::ref(value)});
    const std::int32_t more = b_.rule("map-members");
    b_.add(more, {});
    b_.add(more, seq({literal(","), r(ws_), r(member), r(ws_), r(more)}));
    const std::int32_t map = b_.rule("map");
    b_.add(map, seq({literal("{"), r(ws_), literal("}")}));
    b_.add(map, seq({literal("{"), r(ws_), r(member), r(ws_), r(more), literal("}")}));
    return map;
  }
  // Properties in order, those not required optional. first[i]: what may come from property i on
  // when none came before; after[i]: the same after one did (a comma first).
  const std::size_t n = properties.size();
  std::vector<std::int32_t> first(n + 1), after(n + 1);
  for (std::size_t i = 0; i <= n; ++i) {
    first[i] = b_.rule("properties-from" + std::to_string(i));
    after[i] = b_.rule("properties-after" + std::to_string(i));
  }
  for (std::size_t i = 0; i <= n; ++i) {
    bool required_skipped = false;
    for (std::size_t j = i; j < n && !required_skipped; ++j) {
      b_.add(first[i], seq({r(properties[j].rule), r(ws_), r(after[j + 1])}));
      b_.add(after[i], seq({literal(","), r(ws_), r(properties[j].rule), r(ws_), r(after[j + 1])}));
      required_skipped = properties[j].required;
    }
    if (!required_skipped) {
      b_.add(first[i], {});
      b_.add(after[i], {});
    }
  }
  const std::int32_t object = b_.rule("object" + where);
  b_.add(object, seq({literal("{"), r(ws_), r(first[0]), literal("}")}));
  return object;
}

absl::StatusOr<std::int32_t> JsonGrammar::of_type(const std::string& type, const Json& schema,
                                                  const std::string& where) {
  const auto bound = [&](const char* key) -> absl::StatusOr<std::optional<int>> {
    if (!schema.contains(key)) return std::optional<int>();
    const Json& v = schema[key];
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > kMaxBoundedLength) {
      return absl::InvalidArgumentError(
          str_cat("'", key, "' at ", place(where), " must be an integer in [0, ", kMaxBoundedLength, "], got ", v.dump()));
    }
    return std::optional<int>(v.get<int>());
  };
  if (type == "object") return object_of(schema, where);
  if (type == "array") {
    if (schema.contains("prefixItems")) {
      return absl::InvalidArgumentError(str_cat("'prefixItems' at ", place(where), " is not supported"));
    }
    std::int32_t item = value_;
    if (schema.contains("items")) {
      BATON_ASSIGN_OR_RETURN(item, compile(schema["items"], where + "/items"));
    }
    BATON_ASSIGN_OR_RETURN(const std::optional<int> min, bound("minItems"));
    BATON_ASSIGN_OR_RETURN(const std::optional<int> max, bound("maxItems"));
    if (min && max && *min > *max) {
      return absl::InvalidArgumentError(str_cat("'minItems' at ", place(where), " is above 'maxItems'"));
    }
    if (!min && !max && item == value_) return any_array_;
    return array_of(item, min.value_or(0), max);
  }
  if (type == "string") {
    BATON_ASSIGN_OR_RETURN(const std::optional<int> min, bound("minLength"));
    BATON_ASSIGN_OR_RETURN(const std::optional<int> max, bound("maxLength"));
    if (min && max && *min > *max) {
      return absl::InvalidArgumentError(str_cat("'minLength' at ", place(where), " is above 'maxLength'"));
    }
    if (!min && !max) return string_;
    return string_of_length(min.value_or(0), max);
  }
  if (type == "integer") return integer_;
  if (type == "number") return number_;
  if (type == "boolean") return boolean_;
  if (type == "null") return null_;
  return absl::InvalidArgumentError(str_cat("'type' at ", place(where), " is '", type, "', not a JSON Schema type"));
}

absl::StatusOr<std::int32_t> JsonGrammar::ref(const std::string& target, const std::string& where) {
  if (auto it = refs_.find(target); it != refs_.end()) return it->second;
  std::string name;
  for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
    if (target.rfind(prefix, 0) == 0) name = target.substr(std::string(prefix).size());
  }
  const std::string section = target.rfind("#/$defs/", 0) == 0 ? "$defs" : "definitions";
  if (name.empty() || name.find('/') != std::string::npos || root_schema_ == nullptr ||
      !root_schema_->contains(section) || !(*root_schema_)[section].contains(name)) {
    return absl::InvalidArgumentError(
        str_cat("'$ref' at ", place(where), " is '", target, "'; only \"#/$defs/NAME\" of this schema is supported"));
  }
  // The rule exists before its body is compiled, so that a definition may refer to itself.
  const std::int32_t rule = b_.rule(target);
  refs_.emplace(target, rule);
  BATON_ASSIGN_OR_RETURN(const std::int32_t body, compile((*root_schema_)[section][name], target.substr(1)));
  b_.add(rule, {Symbol::ref(body)});
  return rule;
}

absl::StatusOr<std::int32_t> JsonGrammar::compile(const Json& schema, const std::string& where) {
  // Schemas nest; a client's must not run this recursion out of stack.
  if (depth_ >= kMaxSchemaDepth) {
    return absl::InvalidArgumentError(str_cat("the schema at ", place(where), " is nested more than ", kMaxSchemaDepth,
                                              " deep"));
  }
  ++depth_;
  absl::StatusOr<std::int32_t> rule = compile_node(schema, where);
  --depth_;
  return rule;
}

absl::StatusOr<std::int32_t> JsonGrammar::compile_node(const Json& schema, const std::string& where) {
  if (schema.is_boolean()) {
    if (schema.get<bool>()) return value_;
    return absl::InvalidArgumentError(str_cat("the schema at ", place(where), " is false: no value is valid"));
  }
  if (!schema.is_object()) {
    return absl::InvalidArgumentError(str_cat("the schema at ", place(where), " must be an object or a boolean"));
  }
  for (const auto& [key, value] : schema.items()) {
    if (!annotations().contains(key) && !supported().contains(key)) {
      return absl::InvalidArgumentError(str_cat("'", key, "' at ", place(where), " is not supported"));
    }
  }
  if (schema.contains("$ref")) {
    if (!schema["$ref"].is_string()) return absl::InvalidArgumentError(str_cat("'$ref' at ", place(where), " must be a string"));
    return ref(schema["$ref"].get<std::string>(), where);
  }
  const auto alternatives = [&](const char* key, const std::vector<std::int32_t>& rules) {
    const std::int32_t any = b_.rule(str_cat(key, where));
    for (std::int32_t rule : rules) b_.add(any, {Symbol::ref(rule)});
    return any;
  };
  if (schema.contains("const")) {
    const std::int32_t c = b_.rule("const" + where);
    b_.add(c, literal(schema["const"].dump()));
    return c;
  }
  if (schema.contains("enum")) {
    const Json& values = schema["enum"];
    if (!values.is_array() || values.empty()) {
      return absl::InvalidArgumentError(str_cat("'enum' at ", place(where), " must be a non-empty array"));
    }
    const std::int32_t e = b_.rule("enum" + where);
    for (const Json& v : values) b_.add(e, literal(v.dump()));
    return e;
  }
  for (const char* key : {"anyOf", "oneOf", "allOf"}) {
    if (!schema.contains(key)) continue;
    const Json& list = schema[key];
    if (!list.is_array() || list.empty()) {
      return absl::InvalidArgumentError(str_cat("'", key, "' at ", place(where), " must be a non-empty array"));
    }
    if (std::string(key) == "allOf" && list.size() != 1) {
      return absl::InvalidArgumentError(str_cat("'allOf' at ", place(where), " with more than one schema is not supported"));
    }
    std::vector<std::int32_t> rules;
    for (std::size_t i = 0; i < list.size(); ++i) {
      BATON_ASSIGN_OR_RETURN(const std::int32_t rule, compile(list[i], str_cat(where, "/", key, "/", i)));
      rules.push_back(rule);
    }
    return rules.size() == 1 ? rules[0] : alternatives(key, rules);
  }
  std::vector<std::string> types;
  if (schema.contains("type")) {
    const Json& t = schema["type"];
    if (t.is_string()) {
      types.push_back(t.get<std::string>());
    } else if (t.is_array() && !t.empty()) {
      for (const Json& one : t) {
        if (!one.is_string()) return absl::InvalidArgumentError(str_cat("'type' at ", place(where), " must list type names"));
        types.push_back(one.get<std::string>());
      }
    } else {
      return absl::InvalidArgumentError(str_cat("'type' at ", place(where), " must be a type name or a list of them"));
    }
  } else if (schema.contains("properties") || schema.contains("required") || schema.contains("additionalProperties")) {
    types.push_back("object");
  } else if (schema.contains("items") || schema.contains("minItems") || schema.contains("maxItems")) {
    types.push_back("array");
  } else if (schema.contains("minLength") || schema.contains("maxLength")) {
    types.push_back("string");
  } else {
    return value_;  // only annotations: any value
  }
  std::vector<std::int32_t> rules;
  for (const std::string& type : types) {
    BATON_ASSIGN_OR_RETURN(const std::int32_t rule, of_type(type, schema, where));
    rules.push_back(rule);
  }
  return rules.size() == 1 ? rules[0] : alternatives("type", rules);
}

}  // namespace

std::shared_ptr<const Grammar> json_object_grammar() {
  static const std::shared_ptr<const Grammar> g = [] {
    JsonGrammar j;
    auto built = j.build(j.any_object());
    BATON_CHECK(built.ok(), built.status().message());
    return *built;
  }();
  return g;
}

namespace {

absl::StatusOr<std::shared_ptr<const Grammar>> grammar_of(const Json& schema) {
  JsonGrammar j(&schema);
  BATON_ASSIGN_OR_RETURN(const std::int32_t value, j.compile(schema, ""));
  return j.build(value);
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Grammar>> response_format_grammar(std::string_view response_format) {
  const Json format = Json::parse(response_format, nullptr, /*allow_exceptions=*/false);
  if (format.is_discarded() || !format.is_object()) {
    return absl::InvalidArgumentError("response_format must be a JSON object");
  }
  const Json* type = format.contains("type") ? &format["type"] : nullptr;
  if (type == nullptr || !type->is_string()) {
    return absl::InvalidArgumentError("response_format.type must be \"text\", \"json_object\" or \"json_schema\"");
  }
  if (*type == "text") return std::shared_ptr<const Grammar>();
  if (*type == "json_object") return json_object_grammar();
  if (*type != "json_schema") {
    return absl::InvalidArgumentError(str_cat("response_format.type '", type->get<std::string>(),
                                              "' is not \"text\", \"json_object\" or \"json_schema\""));
  }
  const Json* spec = format.contains("json_schema") ? &format["json_schema"] : nullptr;
  if (spec == nullptr || !spec->is_object() || !spec->contains("schema")) {
    return absl::InvalidArgumentError("response_format.json_schema.schema is required with type \"json_schema\"");
  }
  auto grammar = grammar_of((*spec)["schema"]);
  if (!grammar.ok()) {
    return absl::InvalidArgumentError(str_cat("response_format.json_schema.schema: ", grammar.status().message()));
  }
  return grammar;
}

absl::StatusOr<std::shared_ptr<const Grammar>> json_schema_grammar(std::string_view schema) {
  const Json parsed = Json::parse(schema, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return absl::InvalidArgumentError("the JSON schema is not valid JSON");
  return grammar_of(parsed);
}

}  // namespace baton::structured
