#ifndef TESSERA_COMMON_CHAT_TEMPLATE_JINJA_PARSER_H_
#define TESSERA_COMMON_CHAT_TEMPLATE_JINJA_PARSER_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/chat_template/jinja_ast.h"
#include "common/chat_template/jinja_lexer.h"

namespace tessera::jinja {

// Deeper nesting of blocks or expressions is rejected rather than risking the stack.
inline constexpr int kMaxParseDepth = 128;

// InvalidArgument with the template line for syntax errors, unknown or unclosed tags and
// nesting beyond kMaxParseDepth.
absl::StatusOr<Program> Parse(absl::string_view source, const LexerOptions& options = {});

}  // namespace tessera::jinja

#endif  // TESSERA_COMMON_CHAT_TEMPLATE_JINJA_PARSER_H_
