#ifndef TESSERA_WORKER_SPECULATIVE_REJECTION_SAMPLER_H_
#define TESSERA_WORKER_SPECULATIVE_REJECTION_SAMPLER_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "common/sampling_params.h"
#include "worker/sampler.h"

namespace tessera {

// What a proposer suggests for one sequence: tokens to follow its last one and, for a
// proposer that samples (a draft model at temperature > 0), the distribution each was
// drawn from. A deterministic proposer (prompt lookup, or any greedy one) leaves
// `distributions` empty: its proposal is a point mass.
struct DraftProposal {
  std::vector<int32_t> tokens;
  std::vector<TokenDistribution> distributions;  // Empty, or one per token.
};

// Verifies a proposal against the target model's logits and returns the tokens the
// sequence gains this step: the accepted prefix of the proposal, then one token drawn
// by the target (the correction at the first rejection, or a bonus token when all were
// accepted), so between 1 and tokens.size() + 1 tokens.
//
// `logits` holds tokens.size() + 1 rows of `vocab`: row j is the target's prediction
// after the sequence's last token and the first j proposed ones. `history` is the
// sequence so far (prompt and output), `output_start` where its output begins (as for
// SampleToken) and `first_step` the index of the first token drawn.
//
// The rule keeps the target's distribution exactly (Leviathan et al. 2023, Chen et al.
// 2023): proposal d with draft probability q(d) is accepted with probability
// min(1, p(d) / q(d)), and a rejection draws from max(0, p - q) renormalised; p is
// SamplingDistribution of the row (penalties and truncation included). Under greedy
// sampling that is "accept while d is the argmax", so the output is identical to
// decoding without speculation.
std::vector<SampledToken> VerifyProposal(absl::Span<const float> logits, int vocab,
                                         const DraftProposal& proposal,
                                         const SamplingParams& params,
                                         absl::Span<const int32_t> history, size_t output_start,
                                         uint64_t first_step);

}  // namespace tessera

#endif  // TESSERA_WORKER_SPECULATIVE_REJECTION_SAMPLER_H_
