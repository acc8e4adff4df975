#include "router/http/tool_call_parser.h"

#include <algorithm>

#include "common/status.h"
#include "nlohmann/json.hpp"

namespace baton::router::http {
namespace {

using Json = nlohmann::ordered_json;

bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; });
}

std::string_view trim_blank(std::string_view s) {
  while (!s.empty() && blank(s.substr(0, 1))) s.remove_prefix(1);
  while (!s.empty() && blank(s.substr(s.size() - 1))) s.remove_suffix(1);
  return s;
}

// The length of the longest end of `text` that `tag` starts with (and is shorter than the tag).
std::size_t partial_tag_at_end(std::string_view text, std::string_view tag) {
  for (std::size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

// {"name": "...", <arguments_key>: {...}} as a call; false when `object` is not that. Arguments
// are written back compactly, in their order.
bool call_of(const Json& object, std::initializer_list<const char*> arguments_keys, ToolCallPart& call) {
  if (!object.is_object()) return false;
  auto name = object.find("name");
  if (name == object.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) return false;
  const Json* arguments = nullptr;
  for (const char* key : arguments_keys) {
    if (auto it = object.find(key); it != object.end()) {
      arguments = &*it;
      break;
    }
  }
  if (arguments != nullptr && !arguments->is_object()) return false;
  call.name = name->get<std::string>();
  call.arguments = arguments != nullptr ? arguments->dump() : "{}";
  return true;
}

// hermes: <tool_call>JSON</tool_call> blocks in content.
class HermesParser final : public ToolCallParser {
 public:
  ParsedText feed(std::string_view text) override {
    buffer_ += text;
    ParsedText out;
    for (;;) {
      if (!in_call_) {
        const std::size_t open = buffer_.find(kOpen);
        if (open == std::string::npos) {
          const std::size_t keep = partial_tag_at_end(buffer_, kOpen);
          const std::string_view ready = std::string_view(buffer_).substr(0, buffer_.size() - keep);
          // Blanks after a call wait: dropped if another call or the end follows them.
          if (!(after_call_ && blank(ready))) {
            emit_content(ready, out);
            buffer_.erase(0, ready.size());
          }
          return out;
        }
        const std::string_view before = std::string_view(buffer_).substr(0, open);
        if (!(after_call_ && blank(before))) emit_content(before, out);
        buffer_.erase(0, open + kOpen.size());
        in_call_ = true;
      }
      const std::size_t close = buffer_.find(kClose);
      if (close == std::string::npos) return out;
      end_block(buffer_.substr(0, close), /*closed=*/true, out);
      buffer_.erase(0, close + kClose.size());
      in_call_ = false;
    }
  }

  ParsedText finish() override {
    ParsedText out;
    if (in_call_) {
      end_block(buffer_, /*closed=*/false, out);  // a last block the output ended inside
    } else if (!(after_call_ && blank(buffer_))) {
      emit_content(buffer_, out);
    }
    buffer_.clear();
    return out;
  }

 private:
  static constexpr std::string_view kOpen = "<tool_call>";
  static constexpr std::string_view kClose = "</tool_call>";

  void emit_content(std::string_view text, ParsedText& out) {
    if (text.empty()) return;
    out.content += text;
    after_call_ = false;
  }

  void end_block(const std::string& body, bool closed, ParsedText& out) {
    ToolCallPart call;
    const Json object = Json::parse(trim_blank(body), nullptr, /*allow_exceptions=*/false);
    if (!object.is_discarded() && call_of(object, {"arguments", "parameters"}, call)) {
      call.index = calls_++;
      out.calls.push_back(std::move(call));
      after_call_ = true;
      return;
    }
    emit_content(str_cat(kOpen, body, closed ? kClose : ""), out);
  }

  std::string buffer_;
  bool in_call_ = false;
  bool after_call_ = false;  // the last thing said was a call
  std::size_t calls_ = 0;
};

// Where the JSON object starting at text[0] ('{') ends (one past its '}'), or npos when the text
// ends first. Strings (and their escapes) are skipped; the object's validity is parse()'s job.
std::size_t object_end(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') ++depth;
    else if ((c == '}' || c == ']') && --depth == 0) return i + 1;
  }
  return std::string_view::npos;
}

// llama3_json: the whole output is calls, or content. Decided by its first non-blank text; calls
// are held until the end (a later object that is not a call makes it all content).
class Llama3JsonParser final : public ToolCallParser {
 public:
  ParsedText feed(std::string_view text) override {
    ParsedText out;
    if (mode_ == Mode::kContent) {
      out.content = text;
      return out;
    }
    buffer_ += text;
    if (mode_ == Mode::kUndecided) {
      const std::string_view start = trim_blank(buffer_);
      if (start.empty() || kTag.starts_with(start)) return out;
      if (start.starts_with(kTag) || start.front() == '{') {
        mode_ = Mode::kCalls;
      } else {
        mode_ = Mode::kContent;
        out.content = std::move(buffer_);
        buffer_.clear();
      }
    }
    return out;
  }

  ParsedText finish() override {
    ParsedText out;
    if (mode_ == Mode::kContent) return out;
    std::string_view rest = trim_blank(buffer_);
    if (rest.starts_with(kTag)) rest = trim_blank(rest.substr(kTag.size()));
    std::vector<ToolCallPart> calls;
    bool ok = !rest.empty();
    while (ok && !rest.empty()) {
      const std::size_t end = rest.front() == '{' ? object_end(rest) : std::string_view::npos;
      ToolCallPart call;
      ok = end != std::string_view::npos &&
           call_of(Json::parse(rest.substr(0, end), nullptr, /*allow_exceptions=*/false), {"parameters", "arguments"},
                   call);
      if (!ok) break;
      call.index = calls.size();
      calls.push_back(std::move(call));
      rest = trim_blank(rest.substr(end));
      if (!rest.empty()) {
        ok = rest.front() == ';';
        rest = trim_blank(rest.substr(1));
        ok = ok && !rest.empty();
      }
    }
    if (ok) out.calls = std::move(calls);
    else out.content = std::move(buffer_);
    buffer_.clear();
    return out;
  }

 private:
  static constexpr std::string_view kTag = "<|python_tag|>";
  enum class Mode { kUndecided, kCalls, kContent };
  Mode mode_ = Mode::kUndecided;
  std::string buffer_;
};

// tool_choice naming a function: the output is its arguments, without the blanks the JSON
// grammar allows around them (blanks are held until more text follows them).
class NamedCallParser final : public ToolCallParser {
 public:
  explicit NamedCallParser(std::string name) : name_(std::move(name)) {}

  ParsedText feed(std::string_view text) override {
    ParsedText out;
    held_ += text;
    std::size_t end = held_.size();
    while (end > 0 && blank(std::string_view(held_).substr(end - 1, 1))) --end;
    std::size_t begin = 0;
    if (!started_) {
      while (begin < end && blank(std::string_view(held_).substr(begin, 1))) ++begin;
    }
    if (begin == end) {
      if (!started_) held_.clear();  // leading blanks
      return out;
    }
    out.calls.push_back({0, std::exchange(name_, std::string()), held_.substr(begin, end - begin)});
    held_.erase(0, end);
    started_ = true;
    return out;
  }

  ParsedText finish() override {
    ParsedText out;
    if (!started_) out.calls.push_back({0, std::exchange(name_, std::string()), ""});
    started_ = true;
    held_.clear();
    return out;
  }

 private:
  std::string name_;  // until the first part carries it
  std::string held_;  // blanks that may end the arguments
  bool started_ = false;
};

// tool_choice "required": [{"name": ..., "parameters": {...}}, ...], held until the end.
class RequiredCallsParser final : public ToolCallParser {
 public:
  ParsedText feed(std::string_view text) override {
    buffer_ += text;
    return {};
  }

  ParsedText finish() override {
    ParsedText out;
    const Json calls = Json::parse(buffer_, nullptr, /*allow_exceptions=*/false);
    bool ok = calls.is_array() && !calls.empty();
    for (std::size_t i = 0; ok && i < calls.size(); ++i) {
      ToolCallPart call;
      ok = call_of(calls[i], {"parameters"}, call);
      call.index = i;
      out.calls.push_back(std::move(call));
    }
    if (!ok) {
      out.calls.clear();
      out.content = std::move(buffer_);
    }
    buffer_.clear();
    return out;
  }

 private:
  std::string buffer_;
};

}  // namespace

absl::StatusOr<ToolCallFormat> tool_call_format(std::string_view name) {
  if (name == "hermes") return ToolCallFormat::kHermes;
  if (name == "llama3_json") return ToolCallFormat::kLlama3Json;
  return absl::InvalidArgumentError(
      str_cat("--tool-call-parser: unknown parser \"", name, "\"; this server knows hermes and llama3_json"));
}

const char* tool_call_format_name(ToolCallFormat format) {
  return format == ToolCallFormat::kHermes ? "hermes" : "llama3_json";
}

std::unique_ptr<ToolCallParser> make_tool_call_parser(ToolCallFormat format) {
  if (format == ToolCallFormat::kHermes) return std::make_unique<HermesParser>();
  return std::make_unique<Llama3JsonParser>();
}

std::unique_ptr<ToolCallParser> make_named_call_parser(std::string name) {
  return std::make_unique<NamedCallParser>(std::move(name));
}

std::unique_ptr<ToolCallParser> make_required_calls_parser() { return std::make_unique<RequiredCallsParser>(); }

}  // namespace baton::router::http
