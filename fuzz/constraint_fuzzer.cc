// Untrusted output constraints (a request's JSON Schema, regex, choice or GBNF grammar):
// converting, compiling and matching must fail cleanly or finish within the engine's
// bounds, never crash or hang. The first byte picks the kind, the rest is its text; a
// grammar that compiles is then walked against a small vocabulary, its masks taken on
// the way.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/structured/constraint_grammar.h"
#include "common/structured/grammar.h"
#include "common/structured/token_grammar.h"
#include "common/structured/token_vocabulary.h"

namespace {

std::shared_ptr<const tessera::structured::TokenVocabulary> Vocabulary() {
  static const auto* vocabulary = new std::shared_ptr<const tessera::structured::TokenVocabulary>(
      tessera::structured::TokenVocabulary::Build(
          {"<eos>", "{", "}", "\"", "a", "ab", "abc", " ", "\":", "\",", "0", "12", "[", "]", "\n",
           "true", "null", "\\", "\xC3\xA9", "\xC3", "\xA9", "-", ".", "e", "x", ",", ":", "Z"},
          {0}));
  return *vocabulary;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tessera::structured::OutputConstraint;
  if (size < 1) return 0;
  OutputConstraint c;
  switch (data[0] % 4) {
    case 0: c.kind = OutputConstraint::Kind::kGrammar; break;
    case 1: c.kind = OutputConstraint::Kind::kRegex; break;
    case 2: c.kind = OutputConstraint::Kind::kJsonSchema; break;
    default: c.kind = OutputConstraint::Kind::kChoice; break;
  }
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (c.kind == OutputConstraint::Kind::kChoice) {
    c.choices = {text, text + "!"};
  } else {
    c.text = text;
  }
  auto gbnf = tessera::structured::ConstraintToGbnf(c);
  if (!gbnf.ok()) return 0;
  auto grammar = tessera::structured::Grammar::FromGbnf(*gbnf);
  if (!grammar.ok()) return 0;
  tessera::structured::AutomatonLimits limits;
  limits.max_nodes = 1 << 16;
  limits.max_states = 1 << 12;
  limits.max_stacks_per_state = 256;
  auto tg = std::make_shared<tessera::structured::TokenGrammar>(*grammar, Vocabulary(), limits);
  auto matcher = tessera::structured::GrammarMatcher::Create(tg, {0});
  if (!matcher.ok()) return 0;
  // Follow the first allowed token a few times, as a sampler under the mask would.
  for (int step = 0; step < 16; ++step) {
    auto mask = tg->Mask(matcher->state());
    if (!mask.ok() || (*mask)->num_allowed == 0) break;
    int32_t id = 0;
    while (!(*mask)->Test(id)) ++id;
    if (!matcher->Accept(id).ok()) __builtin_trap();  // The mask allowed it.
  }
  return 0;
}
