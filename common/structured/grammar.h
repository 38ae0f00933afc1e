#ifndef TESSERA_COMMON_STRUCTURED_GRAMMAR_H_
#define TESSERA_COMMON_STRUCTURED_GRAMMAR_H_

#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera::structured {

// Bounds that keep a hostile grammar (or a schema or regex that expands into one) from
// taking unbounded time or memory: past any of them compilation fails with
// RESOURCE_EXHAUSTED naming the bound, never a hang.
struct GrammarLimits {
  size_t max_source_bytes = size_t{1} << 20;  // GBNF text.
  size_t max_elements = size_t{1} << 18;      // After repetitions are expanded.
  size_t max_rules = size_t{1} << 16;
};

// A context-free grammar over bytes, compiled from GBNF (llama.cpp's EBNF dialect):
//
//   root  ::= "{" ws item ("," ws item)* "}"   # start symbol `root`
//   item  ::= [a-z]+ | "\"" [^"\\]* "\""       # classes over Unicode code points
//   ws    ::= [ \t\n]{0,20}                    # ?, *, +, {m}, {m,}, {m,n}, {,n}
//
// Literals and classes are over code points and are matched as their UTF-8 bytes; `.` is
// any character. Repetitions become right-recursive helper rules, so the matcher's stacks
// stay flat however long the output grows.
//
// The flat form the matcher runs: every alternative of every rule is a run of elements
// ending in kEnd; a position is an index into `elements`.
class Grammar {
 public:
  enum class Kind : uint8_t {
    kBytes,  // One byte from byte_sets[arg].
    kRule,   // A whole match of rules[arg].
    kEnd,    // The end of an alternative.
  };
  struct Element {
    Kind kind;
    uint32_t arg;
  };
  struct Rule {
    std::string name;
    std::vector<uint32_t> alternatives;  // Start positions.
  };

  // INVALID_ARGUMENT naming the line and column for a syntax error, an undefined rule, a
  // rule that can only recurse forever or recurses on its left (directly or through
  // rules that match nothing), or no `root`; RESOURCE_EXHAUSTED past `limits`.
  static absl::StatusOr<std::shared_ptr<const Grammar>> FromGbnf(absl::string_view text,
                                                                const GrammarLimits& limits = {});

  // Whether all of `text` is a sentence of the grammar.
  bool Accepts(absl::string_view text) const;
  // Whether `text` is the start of some sentence (every prefix of a sentence is).
  bool AcceptsPrefix(absl::string_view text) const;

  const std::vector<Element>& elements() const { return elements_; }
  const std::vector<std::bitset<256>>& byte_sets() const { return byte_sets_; }
  const std::vector<Rule>& rules() const { return rules_; }
  uint32_t root() const { return root_; }
  // The rule whose alternative holds `position`.
  uint32_t rule_of(uint32_t position) const { return rule_of_[position]; }
  // A stable digest of the compiled form (cache keys).
  const std::string& fingerprint() const { return fingerprint_; }

 private:
  friend class GrammarBuilder;
  std::vector<Element> elements_;
  std::vector<std::bitset<256>> byte_sets_;
  std::vector<Rule> rules_;
  std::vector<uint32_t> rule_of_;
  uint32_t root_ = 0;
  std::string fingerprint_;
};

}  // namespace tessera::structured

#endif  // TESSERA_COMMON_STRUCTURED_GRAMMAR_H_
