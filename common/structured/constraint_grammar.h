#ifndef TESSERA_COMMON_STRUCTURED_CONSTRAINT_GRAMMAR_H_
#define TESSERA_COMMON_STRUCTURED_CONSTRAINT_GRAMMAR_H_

#include <cstddef>
#include <list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/structured/grammar.h"

namespace tessera::structured {

// What a request asks its output to be (the API's Constraint, without the proto).
struct OutputConstraint {
  enum class Kind { kNone, kJsonSchema, kJsonObject, kRegex, kChoice, kGrammar };
  Kind kind = Kind::kNone;
  std::string text;                  // kJsonSchema (JSON text), kRegex, kGrammar (GBNF).
  std::vector<std::string> choices;  // kChoice.
};

// The constraint as GBNF with start symbol `root`. INVALID_ARGUMENT naming what is wrong
// or unsupported (the schema keyword, the regex construct, an empty choice), or
// RESOURCE_EXHAUSTED past the size bounds.
absl::StatusOr<std::string> ConstraintToGbnf(const OutputConstraint& constraint);

// `text` as a GBNF string literal (quotes included).
std::string GbnfLiteral(absl::string_view text);

// Compiled grammars by GBNF text, least recently used dropped first; safe to share
// between threads (the grammars are immutable).
class GrammarCache {
 public:
  explicit GrammarCache(size_t capacity = 256) : capacity_(capacity) {}
  absl::StatusOr<std::shared_ptr<const Grammar>> Get(const std::string& gbnf);

 private:
  size_t capacity_;
  absl::Mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<const Grammar>>> lru_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, decltype(lru_)::iterator> index_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::structured

#endif  // TESSERA_COMMON_STRUCTURED_CONSTRAINT_GRAMMAR_H_
