#include "common/structured/token_grammar.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tessera::structured {

TokenGrammar::TokenGrammar(std::shared_ptr<const Grammar> grammar,
                           std::shared_ptr<const TokenVocabulary> vocabulary,
                           const AutomatonLimits& limits, size_t mask_cache_bytes)
    : automaton_(std::move(grammar), limits),
      vocabulary_(std::move(vocabulary)),
      mask_cache_bytes_(mask_cache_bytes) {}

absl::StatusOr<TokenGrammar::StateId> TokenGrammar::Advance(StateId state, int32_t id) {
  if (id < 0 || id >= vocabulary_->size() || !vocabulary_->is_text(id)) {
    return GrammarAutomaton::kDead;
  }
  return automaton_.StepBytes(state, vocabulary_->bytes(id));
}

absl::StatusOr<std::shared_ptr<const TokenBitmask>> TokenGrammar::Mask(StateId state) {
  if (auto it = masks_.find(state); it != masks_.end()) {
    ++stats_.masks_reused;
    return it->second;
  }
  const auto start = std::chrono::steady_clock::now();
  const TokenVocabulary& v = *vocabulary_;
  auto mask = std::make_shared<TokenBitmask>();
  mask->words.assign((static_cast<size_t>(v.size()) + 63) / 64, 0);
  // Preorder walk: the state at each depth of the current path; a rejected prefix skips
  // its whole subtree.
  std::vector<StateId> at_depth(v.max_depth() + 1);
  at_depth[0] = state;
  const std::vector<int32_t>& ids = v.token_ids();
  const size_t n = v.num_nodes();
  size_t i = 1;
  while (i < n) {
    const uint32_t d = v.node_depth(i);
    StateId next = automaton_.CachedStep(at_depth[d - 1], v.node_byte(i));
    if (next < 0) {
      ASSIGN_OR_RETURN(next, automaton_.Step(at_depth[d - 1], v.node_byte(i)));
    }
    if (next == GrammarAutomaton::kDead) {
      i = v.node_end(i);
      continue;
    }
    at_depth[d] = next;
    for (uint32_t t = v.token_begin(i); t < v.token_begin(i + 1); ++t) {
      mask->words[ids[t] >> 6] |= uint64_t{1} << (ids[t] & 63);
      ++mask->num_allowed;
    }
    ++i;
  }
  const size_t bytes = mask->words.size() * sizeof(uint64_t);
  if (mask_bytes_ + bytes > mask_cache_bytes_) {
    masks_.clear();
    mask_bytes_ = 0;
  }
  masks_[state] = mask;
  mask_bytes_ += bytes;
  ++stats_.masks_computed;
  stats_.mask_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return std::shared_ptr<const TokenBitmask>(std::move(mask));
}

absl::StatusOr<GrammarMatcher> GrammarMatcher::Create(std::shared_ptr<TokenGrammar> grammar,
                                                      std::vector<int32_t> end_ids) {
  ASSIGN_OR_RETURN(StateId initial, grammar->Initial());
  return GrammarMatcher(std::move(grammar), std::move(end_ids), initial);
}

bool GrammarMatcher::IsEnd(int32_t id) const {
  return std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end();
}

absl::StatusOr<GrammarMatcher::StateId> GrammarMatcher::Peek(StateId from,
                                                             absl::Span<const int32_t> ids) {
  StateId s = from;
  for (const int32_t id : ids) {
    if (s == kFinishedState || s == GrammarAutomaton::kDead) return GrammarAutomaton::kDead;
    if (IsEnd(id) && grammar_->automaton().IsAccepting(s)) {
      s = kFinishedState;
      continue;
    }
    ASSIGN_OR_RETURN(s, grammar_->Advance(s, id));
  }
  return s;
}

absl::Status GrammarMatcher::Accept(int32_t id) {
  ASSIGN_OR_RETURN(StateId next, Peek(finished_ ? kFinishedState : state_, {id}));
  if (finished_ && IsEnd(id)) return absl::OkStatus();  // ignore_eos: ends again.
  if (next == GrammarAutomaton::kDead) {
    return absl::InvalidArgumentError(
        absl::StrCat("token ", id, " does not follow the output's grammar"));
  }
  if (next == kFinishedState) {
    finished_ = true;
  } else {
    state_ = next;
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> GrammarMatcher::Allows(StateId state, int32_t id) {
  if (state == kFinishedState) return IsEnd(id);
  if (state == GrammarAutomaton::kDead) return false;
  if (IsEnd(id)) return grammar_->automaton().IsAccepting(state);
  if (id < 0 || id >= grammar_->vocabulary().size()) return false;
  ASSIGN_OR_RETURN(std::shared_ptr<const TokenBitmask> mask, grammar_->Mask(state));
  return mask->Test(id);
}

absl::Status GrammarMatcher::MaskLogits(StateId state, absl::Span<float> logits) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const size_t vocab = std::min(logits.size(), static_cast<size_t>(grammar_->vocabulary().size()));
  // End tokens keep their logits exactly where the grammar is complete.
  std::vector<std::pair<int32_t, float>> ends;
  for (const int32_t id : end_ids_) {
    if (id >= 0 && static_cast<size_t>(id) < logits.size()) ends.push_back({id, logits[id]});
  }
  bool accepting = false;
  if (state == kFinishedState || state == GrammarAutomaton::kDead) {
    std::fill(logits.begin(), logits.end(), kNegInf);
    accepting = state == kFinishedState;
  } else {
    ASSIGN_OR_RETURN(std::shared_ptr<const TokenBitmask> mask, grammar_->Mask(state));
    for (size_t w = 0; w * 64 < vocab; ++w) {
      uint64_t blocked = ~mask->words[w];
      if (blocked == 0) continue;
      const size_t base = w * 64;
      while (blocked != 0) {
        const size_t id = base + static_cast<size_t>(__builtin_ctzll(blocked));
        if (id >= vocab) break;
        logits[id] = kNegInf;
        blocked &= blocked - 1;
      }
    }
    std::fill(logits.begin() + vocab, logits.end(), kNegInf);
    accepting = grammar_->automaton().IsAccepting(state);
  }
  for (const auto& [id, value] : ends) logits[id] = accepting ? value : kNegInf;
  return absl::OkStatus();
}

}  // namespace tessera::structured
