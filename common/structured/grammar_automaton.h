#ifndef TESSERA_COMMON_STRUCTURED_GRAMMAR_AUTOMATON_H_
#define TESSERA_COMMON_STRUCTURED_GRAMMAR_AUTOMATON_H_

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/structured/grammar.h"

namespace tessera::structured {

struct AutomatonLimits {
  size_t max_nodes = size_t{1} << 22;        // Interned stack frames.
  size_t max_states = size_t{1} << 20;       // Interned sets of stacks.
  size_t max_stacks_per_state = 4096;        // Ambiguity: live parses at one point.
  size_t max_closure_depth = 20000;          // Rules entered without consuming a byte.
  size_t transition_cache_bytes = size_t{64} << 20;  // Dropped and rebuilt past this.
};

// The grammar's pushdown automaton, determinised lazily: a state is the set of live
// parse stacks after some bytes, each stack a chain of interned (position, parent)
// frames whose top is at a byte element. Stacks are shared (hash-consed), a rule called
// last in an alternative returns straight to its caller's caller (so repetitions do not
// grow the stack), and each state's byte transitions are computed once and cached, so
// walking the vocabulary trie from a state mostly costs one table lookup per trie node.
//
// Not thread-safe: one owner (a worker's sampling thread, a CLI) at a time.
class GrammarAutomaton {
 public:
  using StateId = int32_t;
  static constexpr StateId kDead = 0;  // No live stack: the bytes left the grammar.

  explicit GrammarAutomaton(std::shared_ptr<const Grammar> grammar,
                            const AutomatonLimits& limits = {});

  // The state before any byte. RESOURCE_EXHAUSTED past the limits.
  absl::StatusOr<StateId> Initial();

  // The state after `byte`; kDead when the grammar cannot take it.
  absl::StatusOr<StateId> Step(StateId state, uint8_t byte) {
    if (const auto* row = rows_[state].get(); row != nullptr) {
      const StateId next = (*row)[byte];
      if (next >= 0) return next;
    }
    return StepSlow(state, byte);
  }
  absl::StatusOr<StateId> StepBytes(StateId state, absl::string_view bytes);
  // The transition if it is already known, else -1 (the vocabulary walk's fast path).
  StateId CachedStep(StateId state, uint8_t byte) const {
    const auto* row = rows_[state].get();
    return row != nullptr ? (*row)[byte] : -1;
  }

  // The grammar may end here (one parse has matched all of root).
  bool IsAccepting(StateId state) const { return accepting_[state]; }
  // More bytes can follow.
  bool CanContinue(StateId state) const {
    return states_[state].size() > (accepting_[state] ? 1u : 0u);
  }

  const Grammar& grammar() const { return *grammar_; }
  size_t num_states() const { return states_.size(); }
  size_t num_nodes() const { return nodes_.size(); }

 private:
  struct Node {
    uint32_t pos;     // kAcceptNode's is unused.
    uint32_t parent;  // The frame to return to (a node at a kRule element), or kRootFrame.
  };
  // Node 0: the frame below root. As a member of a state it means "root has matched".
  static constexpr uint32_t kRootFrame = 0;

  absl::StatusOr<uint32_t> Intern(uint32_t pos, uint32_t parent);
  // The stacks (top at a byte element, or kRootFrame for "accepted") that node `n`
  // stands for once rules are entered and finished alternatives are returned from.
  absl::Status Closure(uint32_t n, size_t depth, std::vector<uint32_t>* out);
  absl::StatusOr<StateId> InternState(std::vector<uint32_t> stacks);
  absl::StatusOr<StateId> StepSlow(StateId state, uint8_t byte);

  std::shared_ptr<const Grammar> grammar_;
  AutomatonLimits limits_;
  std::vector<Node> nodes_;
  absl::flat_hash_map<uint64_t, uint32_t> node_index_;
  // Closure results per node, [begin, end) into closure_data_; begin == -1: not yet.
  std::vector<std::pair<int64_t, int64_t>> closure_range_;
  std::vector<uint32_t> closure_data_;
  std::vector<std::vector<uint32_t>> states_;
  std::vector<bool> accepting_;
  absl::flat_hash_map<std::vector<uint32_t>, StateId> state_index_;
  std::vector<std::unique_ptr<std::array<StateId, 256>>> rows_;
  size_t row_bytes_ = 0;
  StateId initial_ = -1;
};

}  // namespace tessera::structured

#endif  // TESSERA_COMMON_STRUCTURED_GRAMMAR_AUTOMATON_H_
