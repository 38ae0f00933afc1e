#ifndef TESSERA_COMMON_STRUCTURED_GRAMMAR_CHECKS_H_
#define TESSERA_COMMON_STRUCTURED_GRAMMAR_CHECKS_H_

#include "absl/status/status.h"
#include "common/structured/grammar.h"

namespace tessera::structured {

// What the matcher needs of a grammar: every rule can finish (derives some finite
// string), and no rule reaches itself before consuming a byte (left recursion, directly
// or through rules that can match nothing), which would expand forever.
// INVALID_ARGUMENT naming the rule otherwise.
absl::Status CheckGrammar(const Grammar& grammar);

}  // namespace tessera::structured

#endif  // TESSERA_COMMON_STRUCTURED_GRAMMAR_CHECKS_H_
