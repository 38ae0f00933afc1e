#ifndef TESSERA_WORKER_SAMPLER_H_
#define TESSERA_WORKER_SAMPLER_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "common/sampling_params.h"
#include "kernels/backend.h"

namespace tessera {

struct SampledToken {
  int32_t id = 0;
  float logprob = 0.0f;                              // Of the chosen token (after penalties).
  std::vector<std::pair<int32_t, float>> top_logprobs;  // Best first.
};

// Draws the next token from one row of logits. `history` is the sequence so far (prompt
// and output) for the penalties; `output_start` is where the output begins in it (presence
// and frequency penalties count only generated tokens, repetition counts all, as in vLLM).
// `step` is the index of the token being drawn: together with the seed it fixes the
// random draw, so a seeded request gives the same tokens however it is batched or
// preempted.
SampledToken SampleToken(absl::Span<const float> logits, const SamplingParams& params,
                         absl::Span<const int32_t> history, size_t output_start, uint64_t step);

// The same draw on the backend's device sampler (kernels::Backend::SampleOnDevice): the
// row for one sequence, its seed combined with `step` as SampleToken combines them, and
// its penalty entries (distinct tokens of `history`, each with its count in the output)
// appended to `tokens` / `output_counts` when the request has penalties.
kernels::DeviceSamplingRow DeviceSamplingRowFor(const SamplingParams& params,
                                                absl::Span<const int32_t> history,
                                                size_t output_start, uint64_t step,
                                                std::vector<int32_t>* tokens,
                                                std::vector<int32_t>* output_counts);

}  // namespace tessera

#endif  // TESSERA_WORKER_SAMPLER_H_
