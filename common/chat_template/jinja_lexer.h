#ifndef TESSERA_COMMON_CHAT_TEMPLATE_JINJA_LEXER_H_
#define TESSERA_COMMON_CHAT_TEMPLATE_JINJA_LEXER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

// Splits a template into text and tag tokens the way jinja2's lexer does, whitespace
// control included, so the parser never sees whitespace rules.
namespace tessera::jinja {

struct Token {
  enum class Type {
    kText,        // Template data, already trimmed by -, trim_blocks and lstrip_blocks.
    kVarBegin,    // {{
    kVarEnd,      // }}
    kBlockBegin,  // {%
    kBlockEnd,    // %}
    kName,
    kString,      // value holds the unescaped string.
    kInteger,
    kFloat,
    kOperator,    // value holds the operator: + - * / // % ** ~ == != < <= > >= = . , : | ( ) [ ] { }
    kEnd,
  };
  Type type;
  std::string value;
  int line;
};

struct LexerOptions {
  // Hugging Face renders chat templates with both on.
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// InvalidArgument naming the line for an unterminated tag, comment or string, or a
// character that no token starts with.
absl::StatusOr<std::vector<Token>> Tokenize(absl::string_view source, const LexerOptions& options);

}  // namespace tessera::jinja

#endif  // TESSERA_COMMON_CHAT_TEMPLATE_JINJA_LEXER_H_
