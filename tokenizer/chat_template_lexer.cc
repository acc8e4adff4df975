#include "tokenizer/chat_template_lexer.h"

#include <cctype>

#include "common/status.h"
#include "tokenizer/chat_template_value.h"
#include "tokenizer/unicode.h"

namespace baton::jinja {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// transformers renders with trim_blocks and lstrip_blocks: a newline right after a block or
// comment tag is dropped, and spaces/tabs before a block or comment tag at the start of a line
// are dropped. One trailing newline of the template is dropped (keep_trailing_newline=False).
std::string preprocess(std::string_view source) {
  std::string_view src = source;
  if (!src.empty() && src.back() == '\n') src.remove_suffix(1);
  std::string out;
  out.reserve(src.size());
  std::size_t i = 0;
  while (i < src.size()) {
    // lstrip_blocks: at a line start, skip [ \t]* if a block/comment tag follows.
    if (i == 0 || src[i - 1] == '\n') {
      std::size_t j = i;
      while (j < src.size() && (src[j] == ' ' || src[j] == '\t')) ++j;
      if (j + 1 < src.size() && src[j] == '{' && (src[j + 1] == '%' || src[j + 1] == '#' || src[j + 1] == '-')) i = j;
    }
    if (i >= src.size()) break;
    char c = src[i];
    out.push_back(c);
    ++i;
    // trim_blocks: "%}", "#}" or "-}" followed by a newline loses the newline.
    if (c == '}' && out.size() >= 2 && i < src.size() && src[i] == '\n') {
      char before = out[out.size() - 2];
      if (before == '%' || before == '#' || before == '-') ++i;
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {}

  std::vector<Token> run() {
    bool strip_next_text = false;
    while (pos_ < src_.size()) {
      std::size_t open = find_open(pos_);
      std::string text = src_.substr(pos_, open - pos_);
      if (strip_next_text) {
        std::size_t k = 0;
        while (k < text.size() && is_space(text[k])) ++k;
        text.erase(0, k);
        strip_next_text = false;
      }
      if (open == src_.size()) {
        add_text(text);
        pos_ = open;
        break;
      }
      char kind = src_[open + 1];
      bool strip_before = open + 2 < src_.size() && src_[open + 2] == '-';
      if (strip_before) {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      }
      add_text(text);
      count_lines(pos_, open);
      pos_ = open + 2 + (strip_before ? 1 : 0);
      if (kind == '#') {
        std::size_t close = src_.find("#}", pos_);
        if (close == std::string::npos) fail("unterminated comment {# ... #}");
        strip_next_text = close > pos_ && src_[close - 1] == '-';
        count_lines(pos_, close + 2);
        pos_ = close + 2;
        continue;
      }
      bool expr = kind == '{';
      tokens_.push_back({expr ? Token::Kind::kExprOpen : Token::Kind::kStmtOpen, "", line_});
      strip_next_text = lex_tag(expr);
    }
    tokens_.push_back({Token::Kind::kEnd, "", line_});
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw TemplateError(str_cat("line ", line_, ": ", what)); }

  std::size_t find_open(std::size_t from) const {
    for (std::size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return src_.size();
  }

  void count_lines(std::size_t from, std::size_t to) {
    for (std::size_t i = from; i < to && i < src_.size(); ++i) line_ += src_[i] == '\n';
  }

  void add_text(const std::string& text) {
    if (!text.empty()) tokens_.push_back({Token::Kind::kText, text, line_});
  }

  // Lexes the inside of {{ ... }} or {% ... %}; returns whether the closing tag had '-'.
  bool lex_tag(bool expr) {
    const char close_char = expr ? '}' : '%';
    int braces = 0;  // `{{ {'a': {}} }}`: a "}}" closes the tag only outside dict literals
    while (true) {
      while (pos_ < src_.size() && is_space(src_[pos_])) {
        line_ += src_[pos_] == '\n';
        ++pos_;
      }
      if (pos_ >= src_.size()) fail(expr ? "unterminated {{ ... }}" : "unterminated {% ... %}");
      char c = src_[pos_];
      // Closing tag, with optional whitespace control.
      if (c == '-' && braces == 0 && pos_ + 2 < src_.size() && src_[pos_ + 1] == close_char && src_[pos_ + 2] == '}') {
        tokens_.push_back({expr ? Token::Kind::kExprClose : Token::Kind::kStmtClose, "", line_});
        pos_ += 3;
        return true;
      }
      if (c == close_char && braces == 0 && pos_ + 1 < src_.size() && src_[pos_ + 1] == '}') {
        tokens_.push_back({expr ? Token::Kind::kExprClose : Token::Kind::kStmtClose, "", line_});
        pos_ += 2;
        return false;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        std::size_t start = pos_;
        while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
        tokens_.push_back({Token::Kind::kName, src_.substr(start, pos_ - start), line_});
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        std::size_t start = pos_;
        while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
        bool is_float = false;
        if (pos_ + 1 < src_.size() && src_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
          is_float = true;
          ++pos_;
          while (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) ++pos_;
        }
        std::string number;
        for (std::size_t i = start; i < pos_; ++i) {
          if (src_[i] != '_') number.push_back(src_[i]);
        }
        tokens_.push_back({is_float ? Token::Kind::kFloat : Token::Kind::kInteger, number, line_});
        continue;
      }
      if (c == '\'' || c == '"') {
        tokens_.push_back({Token::Kind::kString, lex_string(c), line_});
        continue;
      }
      static const char* kTwoChar[] = {"//", "**", "==", "!=", "<=", ">="};
      bool matched = false;
      for (const char* op : kTwoChar) {
        if (src_.compare(pos_, 2, op) == 0) {
          tokens_.push_back({Token::Kind::kOperator, op, line_});
          pos_ += 2;
          matched = true;
          break;
        }
      }
      if (matched) continue;
      if (c == '{') ++braces;
      if (c == '}') --braces;
      if (std::string_view("+-*/%~<>=()[]{},.:|").find(c) != std::string_view::npos) {
        tokens_.push_back({Token::Kind::kOperator, std::string(1, c), line_});
        ++pos_;
        continue;
      }
      fail(str_cat("unexpected character '", c, "' inside a tag"));
    }
  }

  std::string lex_string(char quote) {
    ++pos_;
    std::string out;
    while (true) {
      if (pos_ >= src_.size()) fail("unterminated string literal");
      char c = src_[pos_++];
      if (c == quote) return out;
      if (c == '\n') ++line_;
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos_ >= src_.size()) fail("unterminated string literal");
      char e = src_[pos_++];
      switch (e) {
        case 'n': out.push_back('\n'); break;
        case 't': out.push_back('\t'); break;
        case 'r': out.push_back('\r'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'v': out.push_back('\v'); break;
        case '0': out.push_back('\0'); break;
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case '\n': ++line_; break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          std::size_t len = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (pos_ + len > src_.size()) fail("truncated \\x/\\u escape in a string literal");
          std::string hex = src_.substr(pos_, len);
          for (char h : hex) {
            if (!std::isxdigit(static_cast<unsigned char>(h))) fail(str_cat("invalid escape \\", e, hex));
          }
          unicode::append_utf8(out, static_cast<char32_t>(std::stoul(hex, nullptr, 16)));
          pos_ += len;
          break;
        }
        default:  // Python keeps unknown escapes as written
          out.push_back('\\');
          out.push_back(e);
      }
    }
  }

  std::string src_;
  std::size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex_template(std::string_view source) { return Lexer(preprocess(source)).run(); }

}  // namespace baton::jinja
