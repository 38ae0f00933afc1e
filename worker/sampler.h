#ifndef TESSERA_WORKER_SAMPLER_H_
#define TESSERA_WORKER_SAMPLER_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "common/sampling_params.h"

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

}  // namespace tessera

#endif  // TESSERA_WORKER_SAMPLER_H_
