#include "tokenizer/normalizers.h"

#include <vector>

#include "common/status.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace baton {

namespace {

using json_fields::get_string;
using json_fields::get_type;

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> children) : children_(std::move(children)) {}
  void normalize(std::string& text) const override {
    for (const auto& child : children_) child->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> children_;
};

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(unicode::NormalForm form) : form_(form) {}
  void normalize(std::string& text) const override {
    std::string out;
    unicode::normalize(form_, text, out);
    text.swap(out);
  }

 private:
  unicode::NormalForm form_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  void normalize(std::string& text) const override { text = unicode::to_lower(text); }
};

// Replace: every match of a literal or a regex becomes `content`.
class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(std::string literal, std::unique_ptr<Regex> regex, std::string content)
      : literal_(std::move(literal)), regex_(std::move(regex)), content_(std::move(content)) {}
  void normalize(std::string& text) const override {
    std::string out;
    if (regex_) {
      std::vector<RegexMatch> matches;
      regex_->find_all(text, matches);
      if (matches.empty()) return;
      std::size_t prev = 0;
      for (const auto& m : matches) {
        out.append(text, prev, m.begin - prev).append(content_);
        prev = m.end;
      }
      out.append(text, prev, std::string::npos);
    } else {
      if (literal_.empty() || text.find(literal_) == std::string::npos) return;
      std::size_t prev = 0;
      for (std::size_t pos = text.find(literal_); pos != std::string::npos; pos = text.find(literal_, prev)) {
        out.append(text, prev, pos - prev).append(content_);
        prev = pos + literal_.size();
      }
      out.append(text, prev, std::string::npos);
    }
    text.swap(out);
  }

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
  std::string content_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

// Strip: removes leading and/or trailing Unicode whitespace.
class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    std::size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        std::size_t pos = begin;
        if (!unicode::is_whitespace(unicode::next_code_point(text, pos))) break;
        begin = pos;
      }
    }
    if (right_) {
      while (end > begin) {
        std::size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        std::size_t pos = start;
        if (!unicode::is_whitespace(unicode::next_code_point(text, pos))) break;
        end = start;
      }
    }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> make_normalizer(const nlohmann::json& config, const std::string& where) {
  BATON_ASSIGN_OR_RETURN(std::string type, get_type(config, where));
  if (type == "Sequence") {
    auto it = config.find("normalizers");
    if (it == config.end() || !it->is_array()) {
      return absl::InvalidArgumentError(str_cat(where, ".normalizers: expected an array"));
    }
    std::vector<std::unique_ptr<Normalizer>> children;
    for (std::size_t i = 0; i < it->size(); ++i) {
      BATON_ASSIGN_OR_RETURN(auto child, make_normalizer((*it)[i], str_cat(where, ".normalizers[", i, "]")));
      children.push_back(std::move(child));
    }
    return std::make_unique<SequenceNormalizer>(std::move(children));
  }
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(unicode::NormalForm::kNFC);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(unicode::NormalForm::kNFD);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(unicode::NormalForm::kNFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(unicode::NormalForm::kNFKD);
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Replace") {
    std::string literal;
    std::unique_ptr<Regex> regex;
    BATON_RETURN_IF_ERROR(parse_pattern(config, where, literal, regex));
    BATON_ASSIGN_OR_RETURN(std::string content, get_string(config, where, "content"));
    return std::make_unique<ReplaceNormalizer>(std::move(literal), std::move(regex), std::move(content));
  }
  if (type == "Prepend") {
    BATON_ASSIGN_OR_RETURN(std::string prefix, get_string(config, where, "prepend"));
    return std::make_unique<PrependNormalizer>(std::move(prefix));
  }
  if (type == "Strip") {
    BATON_ASSIGN_OR_RETURN(bool left, json_fields::get_bool_or(config, where, "strip_left", true));
    BATON_ASSIGN_OR_RETURN(bool right, json_fields::get_bool_or(config, where, "strip_right", true));
    return std::make_unique<StripNormalizer>(left, right);
  }
  return json_fields::unsupported(where, "normalizer", type,
                                  "Sequence, NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend, Strip");
}

}  // namespace baton
