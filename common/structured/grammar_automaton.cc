#include "common/structured/grammar_automaton.h"

#include <algorithm>
#include <bitset>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tessera::structured {

using Kind = Grammar::Kind;

GrammarAutomaton::GrammarAutomaton(std::shared_ptr<const Grammar> grammar,
                                   const AutomatonLimits& limits)
    : grammar_(std::move(grammar)), limits_(limits) {
  nodes_.push_back({0xFFFFFFFFu, kRootFrame});
  closure_range_.push_back({-1, -1});
  // State 0: dead.
  states_.emplace_back();
  accepting_.push_back(false);
  rows_.push_back(std::make_unique<std::array<StateId, 256>>());
  rows_[0]->fill(kDead);
  state_index_[{}] = kDead;
}

absl::StatusOr<uint32_t> GrammarAutomaton::Intern(uint32_t pos, uint32_t parent) {
  const uint64_t key = (uint64_t{pos} << 32) | parent;
  auto [it, inserted] = node_index_.try_emplace(key, static_cast<uint32_t>(nodes_.size()));
  if (inserted) {
    if (nodes_.size() >= limits_.max_nodes) {
      node_index_.erase(it);
      return absl::ResourceExhaustedError(absl::StrCat(
          "grammar matcher outgrew ", limits_.max_nodes,
          " parse-stack frames (the grammar is too ambiguous or nests too deeply)"));
    }
    nodes_.push_back({pos, parent});
    closure_range_.push_back({-1, -1});
  }
  return it->second;
}

absl::Status GrammarAutomaton::Closure(uint32_t n, size_t depth, std::vector<uint32_t>* out) {
  if (closure_range_[n].first >= 0) {
    const auto [b, e] = closure_range_[n];
    out->insert(out->end(), closure_data_.begin() + b, closure_data_.begin() + e);
    return absl::OkStatus();
  }
  if (depth > limits_.max_closure_depth) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "grammar nests more than ", limits_.max_closure_depth, " rules without matching a byte"));
  }
  const auto& elements = grammar_->elements();
  const Node node = nodes_[n];
  std::vector<uint32_t> result;
  const Grammar::Element& e = elements[node.pos];
  if (e.kind == Kind::kBytes) {
    result.push_back(n);
  } else if (e.kind == Kind::kEnd) {
    if (node.parent == kRootFrame) {
      result.push_back(kRootFrame);
    } else {
      const Node frame = nodes_[node.parent];
      ASSIGN_OR_RETURN(uint32_t next, Intern(frame.pos + 1, frame.parent));
      RETURN_IF_ERROR(Closure(next, depth + 1, &result));
    }
  } else {
    // A call in tail position returns straight to this alternative's caller.
    uint32_t frame = node.parent;
    if (elements[node.pos + 1].kind != Kind::kEnd) {
      ASSIGN_OR_RETURN(frame, Intern(node.pos, node.parent));
    }
    for (uint32_t start : grammar_->rules()[e.arg].alternatives) {
      ASSIGN_OR_RETURN(uint32_t child, Intern(start, frame));
      RETURN_IF_ERROR(Closure(child, depth + 1, &result));
    }
  }
  std::sort(result.begin(), result.end());
  result.erase(std::unique(result.begin(), result.end()), result.end());
  if (result.size() > limits_.max_stacks_per_state) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "grammar is too ambiguous: more than ", limits_.max_stacks_per_state,
        " parses alive at once"));
  }
  closure_range_[n] = {static_cast<int64_t>(closure_data_.size()),
                       static_cast<int64_t>(closure_data_.size() + result.size())};
  closure_data_.insert(closure_data_.end(), result.begin(), result.end());
  out->insert(out->end(), result.begin(), result.end());
  return absl::OkStatus();
}

absl::StatusOr<GrammarAutomaton::StateId> GrammarAutomaton::InternState(
    std::vector<uint32_t> stacks) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  if (stacks.size() > limits_.max_stacks_per_state) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "grammar is too ambiguous: more than ", limits_.max_stacks_per_state,
        " parses alive at once"));
  }
  auto it = state_index_.find(stacks);
  if (it != state_index_.end()) return it->second;
  if (states_.size() >= limits_.max_states) {
    return absl::ResourceExhaustedError(
        absl::StrCat("grammar matcher outgrew ", limits_.max_states, " states"));
  }
  const StateId id = static_cast<StateId>(states_.size());
  accepting_.push_back(!stacks.empty() && stacks[0] == kRootFrame);
  state_index_.emplace(stacks, id);
  states_.push_back(std::move(stacks));
  rows_.emplace_back();
  return id;
}

absl::StatusOr<GrammarAutomaton::StateId> GrammarAutomaton::Initial() {
  if (initial_ >= 0) return initial_;
  std::vector<uint32_t> stacks;
  for (uint32_t start : grammar_->rules()[grammar_->root()].alternatives) {
    ASSIGN_OR_RETURN(uint32_t n, Intern(start, kRootFrame));
    RETURN_IF_ERROR(Closure(n, 0, &stacks));
  }
  ASSIGN_OR_RETURN(initial_, InternState(std::move(stacks)));
  return initial_;
}

absl::StatusOr<GrammarAutomaton::StateId> GrammarAutomaton::StepSlow(StateId state,
                                                                      uint8_t byte) {
  const auto& elements = grammar_->elements();
  const auto& sets = grammar_->byte_sets();
  if (rows_[state] == nullptr) {
    // The transition table is a cache: past its budget it starts over.
    if (row_bytes_ + sizeof(std::array<StateId, 256>) > limits_.transition_cache_bytes) {
      for (size_t s = 1; s < rows_.size(); ++s) rows_[s].reset();
      row_bytes_ = 0;
    }
    rows_[state] = std::make_unique<std::array<StateId, 256>>();
    rows_[state]->fill(-1);
    row_bytes_ += sizeof(std::array<StateId, 256>);
  }
  // Stable: rows_ may grow below, the arrays it points to do not move.
  std::array<StateId, 256>& row = *rows_[state];
  std::vector<uint32_t> live;
  for (const uint32_t n : states_[state]) {
    if (n != kRootFrame) live.push_back(n);
  }
  // The state after `b` depends only on which stacks take `b`: bytes the same stacks take
  // share a target, so the whole row costs one closure per distinct set of stacks (a
  // string's body is a handful), not one per byte, and later walks find it filled.
  auto target = [&](uint64_t takers) -> absl::StatusOr<StateId> {
    std::vector<uint32_t> next;
    for (size_t i = 0; i < live.size(); ++i) {
      if (((takers >> i) & 1) == 0) continue;
      const Node node = nodes_[live[i]];
      ASSIGN_OR_RETURN(uint32_t advanced, Intern(node.pos + 1, node.parent));
      RETURN_IF_ERROR(Closure(advanced, 0, &next));
    }
    return InternState(std::move(next));
  };
  if (live.size() > 64) {
    // Very ambiguous states: one byte at a time.
    std::vector<uint32_t> next;
    for (const uint32_t n : live) {
      const Node node = nodes_[n];
      if (!sets[elements[node.pos].arg][byte]) continue;
      ASSIGN_OR_RETURN(uint32_t advanced, Intern(node.pos + 1, node.parent));
      RETURN_IF_ERROR(Closure(advanced, 0, &next));
    }
    ASSIGN_OR_RETURN(row[byte], InternState(std::move(next)));
    return row[byte];
  }
  std::array<uint64_t, 256> takers{};
  for (size_t i = 0; i < live.size(); ++i) {
    const std::bitset<256>& set = sets[elements[nodes_[live[i]].pos].arg];
    for (int b = 0; b < 256; ++b) {
      if (set[b]) takers[b] |= uint64_t{1} << i;
    }
  }
  std::vector<std::pair<uint64_t, StateId>> seen = {{0, kDead}};
  for (int b = 0; b < 256; ++b) {
    StateId id = -1;
    for (const auto& [t, s] : seen) {
      if (t == takers[b]) {
        id = s;
        break;
      }
    }
    if (id < 0) {
      ASSIGN_OR_RETURN(id, target(takers[b]));
      seen.push_back({takers[b], id});
    }
    row[b] = id;
  }
  return row[byte];
}

absl::StatusOr<GrammarAutomaton::StateId> GrammarAutomaton::StepBytes(StateId state,
                                                                      absl::string_view bytes) {
  for (const char c : bytes) {
    if (state == kDead) return kDead;
    ASSIGN_OR_RETURN(state, Step(state, static_cast<uint8_t>(c)));
  }
  return state;
}

namespace {

// The state `grammar` reaches after `text` (kDead when it leaves the grammar), on a
// throwaway automaton over a non-owning pointer: the grammar outlives the call.
absl::StatusOr<GrammarAutomaton::StateId> RunText(const Grammar& grammar, absl::string_view text,
                                                  bool* accepting) {
  GrammarAutomaton automaton(std::shared_ptr<const Grammar>(std::shared_ptr<const Grammar>(), &grammar));
  ASSIGN_OR_RETURN(GrammarAutomaton::StateId s, automaton.Initial());
  ASSIGN_OR_RETURN(s, automaton.StepBytes(s, text));
  *accepting = automaton.IsAccepting(s);
  return s;
}

}  // namespace

bool Grammar::Accepts(absl::string_view text) const {
  bool accepting = false;
  return RunText(*this, text, &accepting).ok() && accepting;
}

bool Grammar::AcceptsPrefix(absl::string_view text) const {
  bool accepting = false;
  absl::StatusOr<GrammarAutomaton::StateId> s = RunText(*this, text, &accepting);
  return s.ok() && *s != GrammarAutomaton::kDead;
}

}  // namespace tessera::structured
