#include "router/http/openai_tools.h"

#include <cstddef>

#include "common/status.h"
#include "engine/structured/json_grammar.h"
#include "router/http/api_error.h"

namespace baton::router::http {
namespace {

using Json = nlohmann::ordered_json;

// Tools one request may offer (the router's limit too: request_limits.h).
constexpr std::size_t kMaxRequestTools = 128;

const Json* field(const Json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

// OpenAI's rule for function names: letters, digits, '_' and '-', at most 64.
bool valid_function_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string function_name(const Json* name, const std::string& where) {
  if (name == nullptr || !name->is_string()) throw bad_field(where, where + " (a string) is required");
  const std::string s = name->get<std::string>();
  if (!valid_function_name(s)) {
    throw bad_field(where, str_cat(where, " must be 1 to 64 letters, digits, '_' or '-', got ",
                                   Json(s.substr(0, 80)).dump()));
  }
  return s;
}

// `tools`, as the chat's tools; their parameter schemas, in order, by name.
std::vector<std::pair<std::string, Json>> parse_tool_list(const Json& tools, baton::v1::ChatMessages& chat) {
  if (!tools.is_array()) throw bad_field("tools", str_cat("tools must be an array of tools, got ", tools.type_name()));
  if (tools.size() > kMaxRequestTools) {
    throw bad_field("tools", str_cat("tools lists ", tools.size(), " tools; at most ", kMaxRequestTools));
  }
  std::vector<std::pair<std::string, Json>> schemas;
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const Json& tool = tools[i];
    const std::string where = str_cat("tools[", i, "]");
    const Json* type = tool.is_object() ? field(tool, "type") : nullptr;
    if (type == nullptr || *type != "function") {
      throw bad_field(where + ".type", str_cat(where, " must be {\"type\": \"function\", \"function\": {...}}"));
    }
    const Json* function = field(tool, "function");
    if (function == nullptr || !function->is_object()) {
      throw bad_field(where + ".function", str_cat(where, ".function must be an object"));
    }
    auto* out = chat.add_tools();
    out->set_name(function_name(field(*function, "name"), where + ".function.name"));
    for (const auto& [earlier, unused] : schemas) {
      if (earlier == out->name()) {
        throw bad_field(where + ".function.name", str_cat("two tools are named ", Json(earlier).dump()));
      }
    }
    if (const Json* d = field(*function, "description")) {
      if (!d->is_string()) throw bad_field(where + ".function.description", where + ".function.description must be a string");
      out->set_description(d->get<std::string>());
    }
    Json schema = {{"type", "object"}};
    if (const Json* p = field(*function, "parameters")) {
      if (!p->is_object()) {
        throw bad_field(where + ".function.parameters",
                        str_cat(where, ".function.parameters must be a JSON Schema object, got ", p->type_name()));
      }
      out->set_parameters(p->dump());
      schema = *p;
    }
    schemas.emplace_back(out->name(), std::move(schema));
  }
  return schemas;
}

// A tool's schema that constrained decoding cannot enforce is refused, naming the tool.
void check_enforceable(const std::string& name, const Json& schema, std::size_t index) {
  auto grammar = structured::json_schema_grammar(schema.dump());
  if (!grammar.ok()) {
    const std::string where = str_cat("tools[", index, "].function.parameters");
    throw bad_field(where, str_cat("tool ", Json(name).dump(), " cannot be forced by tool_choice: its parameters ",
                                   grammar.status().message()));
  }
}

std::string json_schema_format(Json schema) {
  return Json{{"type", "json_schema"}, {"json_schema", {{"name", "tool_calls"}, {"schema", std::move(schema)}}}}.dump();
}

}  // namespace

ToolUse parse_tools(const Json& body, bool auto_tool_choice, baton::v1::ChatMessages& chat,
                    baton::v1::SamplingParams& sampling) {
  ToolUse use;
  std::vector<std::pair<std::string, Json>> schemas;
  if (const Json* tools = field(body, "tools")) schemas = parse_tool_list(*tools, chat);
  if (const Json* p = field(body, "parallel_tool_calls")) {
    if (!p->is_boolean()) throw bad_field("parallel_tool_calls", "parallel_tool_calls must be a boolean");
    use.parallel = p->get<bool>();
  }
  const Json* choice = field(body, "tool_choice");
  if (choice == nullptr) {
    if (schemas.empty()) return use;
    use.choice = ToolChoice::kAuto;
  } else if (choice->is_string()) {
    const std::string mode = choice->get<std::string>();
    if (mode == "none") return use;
    if (mode == "auto") use.choice = ToolChoice::kAuto;
    else if (mode == "required") use.choice = ToolChoice::kRequired;
    else throw bad_field("tool_choice", str_cat("tool_choice must be \"none\", \"auto\", \"required\" or "
                                                "{\"type\": \"function\", \"function\": {\"name\": ...}}, got ",
                                                choice->dump().substr(0, 64)));
  } else {
    const Json* type = choice->is_object() ? field(*choice, "type") : nullptr;
    const Json* function = choice->is_object() ? field(*choice, "function") : nullptr;
    if (type == nullptr || *type != "function" || function == nullptr || !function->is_object()) {
      throw bad_field("tool_choice", "tool_choice must be a string or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    use.choice = ToolChoice::kNamed;
    use.name = function_name(field(*function, "name"), "tool_choice.function.name");
  }
  if (schemas.empty()) {
    throw bad_field("tool_choice", str_cat("tool_choice ", choice->dump().substr(0, 64), " needs tools"));
  }
  if (use.choice == ToolChoice::kAuto) {
    if (!auto_tool_choice) {
      throw bad_field("tool_choice", "\"auto\" tool choice (the default with tools) needs the router started with "
                                     "--enable-auto-tool-choice and --tool-call-parser; or send tool_choice "
                                     "\"none\", \"required\" or a function");
    }
    return use;
  }
  if (!sampling.response_format().empty()) {
    throw bad_field("response_format", "response_format cannot be combined with tool_choice \"required\" or a "
                                       "named function: the calls are the response's format");
  }
  if (use.choice == ToolChoice::kNamed) {
    for (std::size_t i = 0; i < schemas.size(); ++i) {
      if (schemas[i].first != use.name) continue;
      check_enforceable(use.name, schemas[i].second, i);
      sampling.set_response_format(json_schema_format(schemas[i].second));
      return use;
    }
    throw bad_field("tool_choice", str_cat("tool_choice names ", Json(use.name).dump(), ", which is not in tools"));
  }
  // "required": one call or more, each {"name": a tool, "parameters": valid for that tool}.
  Json any_of = Json::array();
  for (std::size_t i = 0; i < schemas.size(); ++i) {
    const auto& [name, schema] = schemas[i];
    check_enforceable(name, schema, i);
    any_of.push_back({{"type", "object"},
                      {"properties", {{"name", {{"const", name}}}, {"parameters", schema}}},
                      {"required", {"name", "parameters"}}});
  }
  Json calls = {{"type", "array"}, {"minItems", 1}};
  if (!use.parallel) calls["maxItems"] = 1;
  calls["items"] = {{"anyOf", std::move(any_of)}};
  sampling.set_response_format(json_schema_format(std::move(calls)));
  return use;
}

void parse_message_tools(const nlohmann::json& message, const std::string& where, baton::v1::ChatMessage& out) {
  using nlohmann::json;
  const auto text = [&](const char* name) -> const json* {
    auto it = message.find(name);
    if (it == message.end() || it->is_null()) return nullptr;
    if (!it->is_string()) throw bad_field(str_cat(where, ".", name), str_cat(where, ".", name, " must be a string"));
    return &*it;
  };
  if (const json* id = text("tool_call_id")) out.set_tool_call_id(id->get<std::string>());
  if (const json* name = text("name")) out.set_name(name->get<std::string>());
  auto it = message.find("tool_calls");
  if (it == message.end() || it->is_null()) return;
  const std::string calls_where = where + ".tool_calls";
  if (!it->is_array()) throw bad_field(calls_where, calls_where + " must be an array of tool calls");
  if (it->size() > kMaxRequestTools) {
    throw bad_field(calls_where, str_cat(calls_where, " holds ", it->size(), " calls; at most ", kMaxRequestTools));
  }
  for (std::size_t k = 0; k < it->size(); ++k) {
    const json& call = (*it)[k];
    const std::string cw = str_cat(calls_where, "[", k, "]");
    const auto function = call.is_object() ? call.find("function") : call.end();
    if (!call.is_object() || function == call.end() || !function->is_object()) {
      throw bad_field(cw, cw + " must be {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
    }
    auto* c = out.add_tool_calls();
    if (auto id = call.find("id"); id != call.end() && id->is_string()) c->set_id(id->get<std::string>());
    auto name = function->find("name");
    if (name == function->end() || !name->is_string()) throw bad_field(cw + ".function.name", cw + ".function.name is required");
    c->set_name(name->get<std::string>());
    auto arguments = function->find("arguments");
    if (arguments == function->end() || !arguments->is_string()) {
      throw bad_field(cw + ".function.arguments", cw + ".function.arguments must be a string of JSON");
    }
    const std::string& a = arguments->get_ref<const std::string&>();
    if (const json parsed = json::parse(a, nullptr, /*allow_exceptions=*/false); !parsed.is_object()) {
      throw bad_field(cw + ".function.arguments", cw + ".function.arguments must hold a JSON object");
    }
    c->set_arguments(a);
  }
}

}  // namespace baton::router::http
