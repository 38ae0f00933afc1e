#ifndef TESSERA_COMMON_STRUCTURED_REGEX_PARSER_H_
#define TESSERA_COMMON_STRUCTURED_REGEX_PARSER_H_

// The parsing half of RegexToGbnf (regex_grammar.h): an ECMAScript-style pattern to a tree
// of code point classes, sequences, alternations and repetitions. Internal to
// common/structured; regex_grammar.cc turns the tree into GBNF.
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera::structured::regex_internal {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
// Groups nested deeper than this are refused: the parser and emitter recurse once a
// level, and no sensible constraint needs more.
constexpr int kMaxDepth = 64;
// Quantifier counts past this are refused before any arithmetic on them.
constexpr int kMaxCount = 1'000'000;

// Sorted, disjoint, non-adjacent inclusive code point ranges.
using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

// Sorted and merged (Normalize), everything else up to U+10FFFF (Complement), and the
// code points in both (Intersect).
Ranges Normalize(Ranges r);
Ranges Complement(const Ranges& r);
Ranges Intersect(const Ranges& a, const Ranges& b);

struct Node {
  enum class Kind { kEmpty, kClass, kConcat, kAlternation, kRepeat };
  Kind kind = Kind::kEmpty;
  Ranges ranges;                // kClass; one code point is a literal.
  std::vector<Node> children;   // kConcat, kAlternation; kRepeat has one.
  int min = 0;
  int max = 0;                  // kRepeat; -1 is unbounded.
};

// The tree of `pattern` (UTF-8), or InvalidArgument naming what and where.
absl::StatusOr<Node> ParseRegex(absl::string_view pattern);

}  // namespace tessera::structured::regex_internal

#endif  // TESSERA_COMMON_STRUCTURED_REGEX_PARSER_H_
