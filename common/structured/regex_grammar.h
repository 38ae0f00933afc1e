#ifndef TESSERA_COMMON_STRUCTURED_REGEX_GRAMMAR_H_
#define TESSERA_COMMON_STRUCTURED_REGEX_GRAMMAR_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera::structured {

// How a regular expression's characters are written into the grammar.
enum class RegexContext {
  kRaw,         // As they are (a regex constraint on the whole output).
  kJsonString,  // Inside a JSON string: '"', '\' and control characters as JSON escapes.
};

// A GBNF expression (grammar.h), usable as a rule body, matching exactly the strings that
// `pattern` matches in full (a leading ^ and trailing $ are accepted and mean nothing
// more). The ECMAScript / Python subset: literals and escapes (\n \t \r \f \v \0 \xHH \uHHHH
// \. etc.), classes ([a-z], negated, \d \w \s \D \W \S inside and outside), `.` (any
// character but newline), groups ((...), (?:...), named groups), alternation, and the
// quantifiers ? * + {m} {m,} {m,n} (lazy forms accepted: they match the same strings).
//
// INVALID_ARGUMENT naming the construct for what a grammar cannot express or Tessera
// does not support (backreferences, lookaround, anchors or \b inside the pattern, ...);
// RESOURCE_EXHAUSTED when bounded repetition would expand the expression past
// `max_bytes` (e.g. (a{1,1000}){1,1000}).
absl::StatusOr<std::string> RegexToGbnf(absl::string_view pattern,
                                        RegexContext context = RegexContext::kRaw,
                                        size_t max_bytes = size_t{1} << 20);

}  // namespace tessera::structured

#endif  // TESSERA_COMMON_STRUCTURED_REGEX_GRAMMAR_H_
