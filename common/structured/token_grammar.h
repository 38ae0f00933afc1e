#ifndef TESSERA_COMMON_STRUCTURED_TOKEN_GRAMMAR_H_
#define TESSERA_COMMON_STRUCTURED_TOKEN_GRAMMAR_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/structured/grammar.h"
#include "common/structured/grammar_automaton.h"
#include "common/structured/token_vocabulary.h"

namespace tessera::structured {

// The text tokens allowed in one automaton state, one bit per token id.
struct TokenBitmask {
  std::vector<uint64_t> words;
  int32_t num_allowed = 0;

  bool Test(int32_t id) const { return (words[id >> 6] >> (id & 63)) & 1; }
};

struct TokenGrammarStats {
  uint64_t masks_computed = 0;  // Trie walks (mask cache misses).
  uint64_t masks_reused = 0;    // Cache hits.
  double mask_seconds = 0;      // Spent in trie walks.
};

// A grammar bound to a vocabulary: which tokens each state allows, computed by walking the
// vocabulary trie through the automaton once per state and cached (bounded; past the
// budget the cache starts over). A service that sends the same schema again finds its
// states' masks already there.
//
// Not thread-safe, like the automaton it owns.
class TokenGrammar {
 public:
  using StateId = GrammarAutomaton::StateId;

  TokenGrammar(std::shared_ptr<const Grammar> grammar,
               std::shared_ptr<const TokenVocabulary> vocabulary,
               const AutomatonLimits& limits = {}, size_t mask_cache_bytes = size_t{256} << 20);

  absl::StatusOr<StateId> Initial() { return automaton_.Initial(); }
  // The state after text token `id`; kDead for a special token or one the grammar rejects.
  absl::StatusOr<StateId> Advance(StateId state, int32_t id);
  absl::StatusOr<std::shared_ptr<const TokenBitmask>> Mask(StateId state);

  GrammarAutomaton& automaton() { return automaton_; }
  const TokenVocabulary& vocabulary() const { return *vocabulary_; }
  const TokenGrammarStats& stats() const { return stats_; }

 private:
  GrammarAutomaton automaton_;
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  size_t mask_cache_bytes_;
  absl::flat_hash_map<StateId, std::shared_ptr<const TokenBitmask>> masks_;
  size_t mask_bytes_ = 0;
  TokenGrammarStats stats_;
};

// One sequence's position in its grammar: advanced by the tokens it accepts (sampled ones,
// or its earlier output replayed after preemption); speculative rows take their masks
// from states derived without moving it.
class GrammarMatcher {
 public:
  using StateId = GrammarAutomaton::StateId;

  // `end_ids`: the tokens that end the output (EOS, stop token ids), allowed exactly
  // where the grammar is complete.
  static absl::StatusOr<GrammarMatcher> Create(std::shared_ptr<TokenGrammar> grammar,
                                               std::vector<int32_t> end_ids);

  // INVALID_ARGUMENT when the grammar does not allow `id` here (a caller that samples
  // under the mask never sees this).
  absl::Status Accept(int32_t id);
  // The state after `ids` from this one, without accepting them (kDead if they leave the
  // grammar; an end token ends it).
  absl::StatusOr<StateId> Peek(StateId from, absl::Span<const int32_t> ids);
  // Sets every logit the grammar does not allow in `state` to -infinity. Ids past the
  // vocabulary (padded logits rows) are never allowed.
  absl::Status MaskLogits(StateId state, absl::Span<float> logits);
  // Whether `id` is allowed in `state` (tests, speculative checks).
  absl::StatusOr<bool> Allows(StateId state, int32_t id);

  StateId state() const { return state_; }
  bool finished() const { return finished_; }
  bool IsEnd(int32_t id) const;
  TokenGrammar& grammar() { return *grammar_; }

 private:
  GrammarMatcher(std::shared_ptr<TokenGrammar> grammar, std::vector<int32_t> end_ids,
                 StateId initial)
      : grammar_(std::move(grammar)), end_ids_(std::move(end_ids)), state_(initial) {}

  std::shared_ptr<TokenGrammar> grammar_;
  std::vector<int32_t> end_ids_;
  StateId state_;
  bool finished_ = false;  // An end token was accepted.
};

// A finished output (an end token accepted) allows only end tokens again.
inline constexpr GrammarAutomaton::StateId kFinishedState = -1;

}  // namespace tessera::structured

#endif  // TESSERA_COMMON_STRUCTURED_TOKEN_GRAMMAR_H_
