#include "tokenizer/decoders.h"

#include "common/status.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace baton {

namespace {

using json_fields::get_bool_or;
using json_fields::get_string;
using json_fields::get_string_or;

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> children) : children_(std::move(children)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& child : children_) child->decode_chain(tokens);
  }
  void decode_chain_raw(std::vector<std::string>& tokens) const override {
    for (const auto& child : children_) child->decode_chain_raw(tokens);
  }
  bool joins_byte_runs() const override {
    for (const auto& child : children_) {
      if (child->joins_byte_runs()) return true;
    }
    return false;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> children_;
};

// Maps GPT-2 stand-in characters back to bytes; a token holding any other character contributes
// its own UTF-8 bytes. All tokens fuse into one string, repaired like String::from_utf8_lossy.
class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    decode_chain_raw(tokens);
    tokens[0] = unicode::utf8_lossy(tokens[0]);
  }
  void decode_chain_raw(std::vector<std::string>& tokens) const override {
    const auto& table = unicode::byte_level_table();
    std::string bytes;
    std::string token_bytes;
    for (const auto& token : tokens) {
      token_bytes.clear();
      bool mapped = true;
      std::size_t pos = 0;
      while (pos < token.size()) {
        char32_t cp = unicode::next_code_point(token, pos);
        if (cp >= table.char_to_byte.size() || table.char_to_byte[cp] < 0) {
          mapped = false;
          break;
        }
        token_bytes.push_back(static_cast<char>(table.char_to_byte[cp]));
      }
      bytes.append(mapped ? token_bytes : token);
    }
    tokens.assign(1, std::move(bytes));
  }
};

// The replacement character becomes a space, except in the first token when a prefix space was
// prepended at encode time (there it is dropped).
class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool drop_in_first) : replacement_(std::move(replacement)), drop_in_first_(drop_in_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      std::string& token = tokens[i];
      if (token.find(replacement_) == std::string::npos) continue;
      std::string out;
      std::size_t prev = 0;
      for (std::size_t pos = token.find(replacement_); pos != std::string::npos;
           pos = token.find(replacement_, prev)) {
        out.append(token, prev, pos - prev);
        if (!(i == 0 && drop_in_first_)) out.push_back(' ');
        prev = pos + replacement_.size();
      }
      out.append(token, prev, std::string::npos);
      token.swap(out);
    }
  }

 private:
  std::string replacement_;
  bool drop_in_first_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(std::string literal, std::unique_ptr<Regex> regex, std::string content)
      : literal_(std::move(literal)), regex_(std::move(regex)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<RegexMatch> matches;
    for (auto& token : tokens) {
      matches.clear();
      if (regex_) {
        regex_->find_all(token, matches);
      } else if (!literal_.empty()) {
        for (std::size_t pos = token.find(literal_); pos != std::string::npos;
             pos = token.find(literal_, pos + literal_.size())) {
          matches.push_back({pos, pos + literal_.size()});
        }
      }
      if (matches.empty()) continue;
      std::string out;
      std::size_t prev = 0;
      for (const auto& m : matches) {
        out.append(token, prev, m.begin - prev).append(content_);
        prev = m.end;
      }
      out.append(token, prev, std::string::npos);
      token.swap(out);
    }
  }

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
  std::string content_;
};

// Runs of <0xXX> tokens become the text of their bytes; an invalid run becomes one U+FFFD per byte.
class ByteFallbackDecoder final : public Decoder {
 public:
  bool joins_byte_runs() const override { return true; }
  void decode_chain(std::vector<std::string>& tokens) const override { decode(tokens, /*repair=*/true); }
  void decode_chain_raw(std::vector<std::string>& tokens) const override { decode(tokens, /*repair=*/false); }

 private:
  void decode(std::vector<std::string>& tokens, bool repair) const {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string run;
    std::size_t run_length = 0;
    auto flush = [&] {
      if (run_length == 0) return;
      if (!repair || unicode::is_valid_utf8(run)) {
        out.push_back(run);
      } else {
        for (std::size_t i = 0; i < run_length; ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      run.clear();
      run_length = 0;
    };
    for (auto& token : tokens) {
      int byte = parse_byte_token(token);
      if (byte >= 0) {
        run.push_back(static_cast<char>(byte));
        ++run_length;
        continue;
      }
      flush();
      out.push_back(std::move(token));
    }
    flush();
    tokens.swap(out);
  }

 private:
  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  // "<0xHH>" -> HH; Rust's u8::from_str_radix also takes "+H". -1 when not a byte token.
  static int parse_byte_token(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
    if (t[3] == '+') return hex(t[4]);
    int hi = hex(t[3]), lo = hex(t[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all.append(t);
    tokens.assign(1, std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing copies of one character from every token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, std::size_t start, std::size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    const std::size_t n = content_.size();
    for (auto& token : tokens) {
      std::size_t begin = 0, end = token.size();
      for (std::size_t i = 0; i < start_ && end - begin >= n && token.compare(begin, n, content_) == 0; ++i) begin += n;
      for (std::size_t i = 0; i < stop_ && end - begin >= n && token.compare(end - n, n, content_) == 0; ++i) end -= n;
      token = token.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  std::size_t start_, stop_;
};

// Classic BPE end-of-word suffix: the suffix becomes a space, except in the last token.
class BpeSuffixDecoder final : public Decoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const char* replacement = i + 1 == tokens.size() ? "" : " ";
      std::string& token = tokens[i];
      std::string out;
      std::size_t prev = 0;
      for (std::size_t pos = token.find(suffix_); !suffix_.empty() && pos != std::string::npos;
           pos = token.find(suffix_, prev)) {
        out.append(token, prev, pos - prev).append(replacement);
        prev = pos + suffix_.size();
      }
      out.append(token, prev, std::string::npos);
      token.swap(out);
    }
  }

 private:
  std::string suffix_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Decoder>> make_decoder(const nlohmann::json& config, const std::string& where) {
  BATON_ASSIGN_OR_RETURN(std::string type, json_fields::get_type(config, where));
  if (type == "Sequence") {
    auto it = config.find("decoders");
    if (it == config.end() || !it->is_array()) {
      return absl::InvalidArgumentError(str_cat(where, ".decoders: expected an array"));
    }
    std::vector<std::unique_ptr<Decoder>> children;
    for (std::size_t i = 0; i < it->size(); ++i) {
      BATON_ASSIGN_OR_RETURN(auto child, make_decoder((*it)[i], str_cat(where, ".decoders[", i, "]")));
      children.push_back(std::move(child));
    }
    return std::make_unique<SequenceDecoder>(std::move(children));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") {
    BATON_ASSIGN_OR_RETURN(std::string replacement, get_string_or(config, where, "replacement", "\xE2\x96\x81"));
    bool drop_in_first = true;
    if (config.contains("prepend_scheme")) {
      BATON_ASSIGN_OR_RETURN(std::string scheme, get_string(config, where, "prepend_scheme"));
      drop_in_first = scheme != "never";
    } else {
      BATON_ASSIGN_OR_RETURN(drop_in_first, get_bool_or(config, where, "add_prefix_space", true));
    }
    return std::make_unique<MetaspaceDecoder>(std::move(replacement), drop_in_first);
  }
  if (type == "Replace") {
    std::string literal;
    std::unique_ptr<Regex> regex;
    BATON_RETURN_IF_ERROR(parse_pattern(config, where, literal, regex));
    BATON_ASSIGN_OR_RETURN(std::string content, get_string(config, where, "content"));
    return std::make_unique<ReplaceDecoder>(std::move(literal), std::move(regex), std::move(content));
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    BATON_ASSIGN_OR_RETURN(std::string content, get_string(config, where, "content"));
    std::size_t pos = 0;
    if (content.empty() || (unicode::next_code_point(content, pos), pos != content.size())) {
      return absl::InvalidArgumentError(str_cat(where, ".content: expected exactly one character, got \"", content, "\""));
    }
    BATON_ASSIGN_OR_RETURN(long long start, json_fields::get_int_or(config, where, "start", 0));
    BATON_ASSIGN_OR_RETURN(long long stop, json_fields::get_int_or(config, where, "stop", 0));
    if (start < 0 || stop < 0) return absl::InvalidArgumentError(str_cat(where, ": start/stop must be >= 0"));
    // After a Fuse, start strips the text's first characters, and DecodeStream (which decodes a
    // window of the last tokens) reproduces that for start <= 1 only: more is refused, Fuse or not
    // (Llama 2 and Mistral use 1; no known tokenizer uses more).
    if (start > 1) {
      return absl::UnimplementedError(str_cat(where, ".start: ", start, " is not supported by Baton's tokenizer (0 or 1); "
                                                     "streamed text would differ from decode()"));
    }
    return std::make_unique<StripDecoder>(std::move(content), static_cast<std::size_t>(start),
                                          static_cast<std::size_t>(stop));
  }
  if (type == "BPEDecoder") {
    BATON_ASSIGN_OR_RETURN(std::string suffix, get_string_or(config, where, "suffix", "</w>"));
    return std::make_unique<BpeSuffixDecoder>(std::move(suffix));
  }
  return json_fields::unsupported(where, "decoder", type,
                                  "Sequence, ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, BPEDecoder");
}

}  // namespace baton
