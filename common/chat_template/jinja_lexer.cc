#include "common/chat_template/jinja_lexer.h"

#include <algorithm>
#include <cctype>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/chat_template/jinja_text.h"

namespace tessera::jinja {
namespace {

absl::Status Error(int line, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("template line ", line, ": ", message));
}

// jinja2 joins the template's lines with "\n" and, without keep_trailing_newline, drops
// one final newline.
std::string NormalizeNewlines(absl::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Whitespace as Python's \s (Unicode), which jinja2's "-" strips.
size_t SkipWhitespace(const std::string& s, size_t pos) {
  while (pos < s.size()) {
    if (std::isspace(static_cast<unsigned char>(s[pos])) != 0) {
      ++pos;
      continue;
    }
    std::vector<char32_t> cp = DecodeUtf8(absl::string_view(s).substr(pos, std::min<size_t>(4, s.size() - pos)));
    if (cp.empty() || cp[0] < 0x80 || !IsPythonSpace(cp[0])) break;
    std::string encoded;
    AppendUtf8(cp[0], &encoded);
    pos += encoded.size();
  }
  return pos;
}

std::string RstripAll(absl::string_view text) { return PyStrip(text, std::nullopt, false, true); }

int CountLines(absl::string_view s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

class Lexer {
 public:
  Lexer(std::string source, const LexerOptions& options) : src_(std::move(source)), options_(options) {}

  absl::StatusOr<std::vector<Token>> Run() {
    bool line_starting = true;  // The previous lexeme ended a line (jinja2's lstrip rule).
    while (pos_ <= src_.size()) {
      size_t start = FindTagStart(pos_);
      std::string text = src_.substr(pos_, start == std::string::npos ? std::string::npos : start - pos_);
      if (start == std::string::npos) {
        EmitText(std::move(text));
        break;
      }
      const char kind = src_[start + 1];  // '{', '%' or '#'
      const char modifier = start + 2 < src_.size() ? src_[start + 2] : '\0';
      if (modifier == '-') {
        text = RstripAll(text);
      } else if (modifier != '+' && options_.lstrip_blocks && kind != '{') {
        const size_t line_begin = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if ((line_begin > 0 || line_starting) &&
            text.find_first_not_of(" \t", line_begin) == std::string::npos) {
          text.resize(line_begin);
        }
      }
      line_ += CountLines(src_.substr(pos_, start - pos_));
      EmitText(std::move(text));
      pos_ = start + 2 + ((modifier == '-' || modifier == '+') ? 1 : 0);
      absl::Status status = kind == '#' ? LexComment() : LexTag(kind);
      if (!status.ok()) return status;
      line_starting = pos_ > 0 && src_[pos_ - 1] == '\n';
    }
    tokens_.push_back({Token::Type::kEnd, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t FindTagStart(size_t from) const {
    size_t pos = from;
    while ((pos = src_.find('{', pos)) != std::string::npos) {
      if (pos + 1 < src_.size() && (src_[pos + 1] == '{' || src_[pos + 1] == '%' || src_[pos + 1] == '#')) {
        return pos;
      }
      ++pos;
    }
    return std::string::npos;
  }

  void EmitText(std::string text) {
    if (!text.empty()) tokens_.push_back({Token::Type::kText, std::move(text), line_});
  }

  // After a closing %} or #}: "-" strips all whitespace, "+" nothing, otherwise
  // trim_blocks removes one newline.
  void AfterBlockEnd(char modifier) {
    if (modifier == '-') {
      size_t end = SkipWhitespace(src_, pos_);
      line_ += CountLines(absl::string_view(src_).substr(pos_, end - pos_));
      pos_ = end;
    } else if (modifier != '+' && options_.trim_blocks && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      ++line_;
    }
  }

  absl::Status LexComment() {
    const int begin_line = line_;
    size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) return Error(begin_line, "unterminated comment (missing #})");
    const char modifier = end > pos_ ? src_[end - 1] : '\0';
    line_ += CountLines(absl::string_view(src_).substr(pos_, end - pos_));
    pos_ = end + 2;
    AfterBlockEnd(modifier == '-' || modifier == '+' ? modifier : '\0');
    return absl::OkStatus();
  }

  absl::Status LexTag(char kind) {
    const int begin_line = line_;
    const bool is_block = kind == '%';
    tokens_.push_back({is_block ? Token::Type::kBlockBegin : Token::Type::kVarBegin, "", line_});
    const char close = is_block ? '%' : '}';
    // Inside brackets "}}" closes a dict, not the tag ({{ {'a': {'b': 1}} }}), as in jinja2.
    int open_brackets = 0;
    while (true) {
      pos_ = SkipWhitespaceCounting(pos_);
      if (pos_ >= src_.size()) {
        return Error(begin_line, is_block ? "unterminated block tag (missing %})" : "unterminated expression (missing }})");
      }
      // Closing, with its optional modifier.
      char modifier = '\0';
      size_t close_at = pos_;
      if ((src_[pos_] == '-' || src_[pos_] == '+') && pos_ + 1 < src_.size() && src_[pos_ + 1] == close &&
          pos_ + 2 < src_.size() && src_[pos_ + 2] == '}') {
        modifier = src_[pos_];
        close_at = pos_ + 1;
      }
      if (open_brackets == 0 && src_[close_at] == close && close_at + 1 < src_.size() && src_[close_at + 1] == '}') {
        pos_ = close_at + 2;
        tokens_.push_back({is_block ? Token::Type::kBlockEnd : Token::Type::kVarEnd, "", line_});
        if (is_block) {
          AfterBlockEnd(modifier);
        } else if (modifier == '-') {
          size_t end = SkipWhitespace(src_, pos_);
          line_ += CountLines(absl::string_view(src_).substr(pos_, end - pos_));
          pos_ = end;
        }
        return absl::OkStatus();
      }
      if (absl::Status s = LexExpressionToken(); !s.ok()) return s;
      const Token& last = tokens_.back();
      if (last.type == Token::Type::kOperator) {
        if (last.value == "(" || last.value == "[" || last.value == "{") ++open_brackets;
        if ((last.value == ")" || last.value == "]" || last.value == "}") && open_brackets > 0) --open_brackets;
      }
    }
  }

  size_t SkipWhitespaceCounting(size_t pos) {
    while (pos < src_.size() && (src_[pos] == ' ' || src_[pos] == '\t' || src_[pos] == '\n' || src_[pos] == '\r')) {
      if (src_[pos] == '\n') ++line_;
      ++pos;
    }
    return pos;
  }

  absl::Status LexExpressionToken() {
    const char c = src_[pos_];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t end = pos_;
      while (end < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[end])) || src_[end] == '_')) ++end;
      tokens_.push_back({Token::Type::kName, src_.substr(pos_, end - pos_), line_});
      pos_ = end;
      return absl::OkStatus();
    }
    if (std::isdigit(static_cast<unsigned char>(c))) return LexNumber();
    if (c == '\'' || c == '"') return LexString(c);
    static constexpr absl::string_view kTwoChar[] = {"**", "//", "==", "!=", "<=", ">="};
    for (absl::string_view op : kTwoChar) {
      if (src_.compare(pos_, 2, op.data(), op.size()) == 0) {
        tokens_.push_back({Token::Type::kOperator, std::string(op), line_});
        pos_ += 2;
        return absl::OkStatus();
      }
    }
    static constexpr absl::string_view kOneChar = "+-*/%~<>=.,:|()[]{}";
    if (kOneChar.find(c) != absl::string_view::npos) {
      tokens_.push_back({Token::Type::kOperator, std::string(1, c), line_});
      ++pos_;
      return absl::OkStatus();
    }
    return Error(line_, absl::StrCat("unexpected character '", std::string(1, c), "'"));
  }

  absl::Status LexNumber() {
    size_t end = pos_;
    auto digits = [&] {
      while (end < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[end])) || src_[end] == '_')) ++end;
    };
    digits();
    bool is_float = false;
    if (end + 1 < src_.size() && src_[end] == '.' && std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
      is_float = true;
      ++end;
      digits();
    }
    if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t exp = end + 1;
      if (exp < src_.size() && (src_[exp] == '+' || src_[exp] == '-')) ++exp;
      if (exp < src_.size() && std::isdigit(static_cast<unsigned char>(src_[exp]))) {
        is_float = true;
        end = exp;
        digits();
      }
    }
    std::string text;
    for (size_t i = pos_; i < end; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    tokens_.push_back({is_float ? Token::Type::kFloat : Token::Type::kInteger, text, line_});
    pos_ = end;
    return absl::OkStatus();
  }

  absl::Status LexString(char quote) {
    const int begin_line = line_;
    std::string value;
    size_t i = pos_ + 1;
    while (true) {
      if (i >= src_.size()) return Error(begin_line, "unterminated string literal");
      const char c = src_[i];
      if (c == quote) break;
      if (c == '\n') ++line_;
      if (c != '\\' || i + 1 >= src_.size()) {
        value += c;
        ++i;
        continue;
      }
      // Python's escapes, which jinja2 applies to string literals.
      const char e = src_[i + 1];
      i += 2;
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case '0': value += '\0'; break;
        case 'a': value += '\a'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'v': value += '\v'; break;
        case '\n': ++line_; break;  // A line continuation.
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (i + n > src_.size()) return Error(line_, "truncated \\x/\\u escape in string literal");
          char32_t cp = 0;
          for (size_t k = 0; k < n; ++k) {
            const char h = src_[i + k];
            if (!std::isxdigit(static_cast<unsigned char>(h))) return Error(line_, "bad \\x/\\u escape in string literal");
            cp = cp * 16 + static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
          }
          if (cp > 0x10FFFF) return Error(line_, "\\U escape out of range");
          AppendUtf8(cp, &value);
          i += n;
          break;
        }
        default:  // Python keeps unknown escapes as written.
          value += '\\';
          value += e;
      }
    }
    tokens_.push_back({Token::Type::kString, std::move(value), begin_line});
    pos_ = i + 1;
    return absl::OkStatus();
  }

  std::string src_;
  LexerOptions options_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Tokenize(absl::string_view source, const LexerOptions& options) {
  return Lexer(NormalizeNewlines(source), options).Run();
}

}  // namespace tessera::jinja
