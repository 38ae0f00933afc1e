#ifndef TESSERA_WORKER_SPECULATIVE_PROPOSER_H_
#define TESSERA_WORKER_SPECULATIVE_PROPOSER_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/sampling_params.h"
#include "worker/speculative/rejection_sampler.h"

namespace tessera {

// One decoding sequence that may speculate this step.
struct ProposalRequest {
  uint64_t seq_id = 0;
  // Prompt and output so far; the last token is the one this step computes.
  absl::Span<const int32_t> tokens;
  // Its KV block table, with room for max_tokens positions past the last token.
  absl::Span<const int32_t> blocks;
  size_t output_start = 0;  // Where the output begins in `tokens`.
  const SamplingParams* sampling = nullptr;
  int max_tokens = 0;       // Propose at most this many.
};

// Suggests tokens for the target model to verify (worker/speculative/rejection_sampler.h).
// Every rank of a group runs the same proposer on the same requests and must reach the
// same proposals, since they all feed them to the target's forward pass.
class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual std::string_view name() const = 0;
  // One proposal per request, in order; each may be shorter than max_tokens, or empty.
  virtual absl::StatusOr<std::vector<DraftProposal>> Propose(
      absl::Span<const ProposalRequest> requests) = 0;
  // The sequence is finished or preempted: drop what is kept for it.
  virtual void Forget(uint64_t seq_id) {}
};

}  // namespace tessera

#endif  // TESSERA_WORKER_SPECULATIVE_PROPOSER_H_
