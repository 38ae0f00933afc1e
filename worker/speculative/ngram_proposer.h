#ifndef TESSERA_WORKER_SPECULATIVE_NGRAM_PROPOSER_H_
#define TESSERA_WORKER_SPECULATIVE_NGRAM_PROPOSER_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "worker/speculative/proposer.h"

namespace tessera {

// Prompt lookup (n-gram) speculation: no second model. The sequence's last n tokens
// (n from max_n down to min_n) are searched for earlier in the prompt and output; the
// tokens that followed the most recent match are proposed. Summaries, code edits and
// extraction copy long spans of their input, which this finds for the cost of a search.
class NgramProposer final : public Proposer {
 public:
  NgramProposer(int min_n, int max_n) : min_n_(min_n), max_n_(max_n) {}
  std::string_view name() const override { return "ngram"; }
  absl::StatusOr<std::vector<DraftProposal>> Propose(
      absl::Span<const ProposalRequest> requests) override;

 private:
  int min_n_;
  int max_n_;
};

// The lookup for one sequence: up to `k` tokens continuing `tokens`, or none. When the
// match is close to the end the continuation runs on into the proposal itself, so a
// repeating cycle is proposed for all k tokens.
std::vector<int32_t> NgramLookup(absl::Span<const int32_t> tokens, int min_n, int max_n, int k);

}  // namespace tessera

#endif  // TESSERA_WORKER_SPECULATIVE_NGRAM_PROPOSER_H_
