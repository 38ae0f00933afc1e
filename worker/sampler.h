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
  // log_softmax of the raw logits at the chosen token, when the request asks for logprobs
  // (num_logprobs > 0; nothing reads it otherwise, and a 128k vocabulary's normaliser
  // costs about a millisecond per row on a CPU); 0 otherwise.
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top_logprobs;  // Best first.
};

// The distribution a token is drawn from: the kept candidates of one logits row after
// penalties, temperature and top-k / min-p / top-p truncation, best first, with their
// unnormalised weights (probability = weight / total). Greedy is the argmax alone.
struct TokenDistribution {
  std::vector<int32_t> ids;
  std::vector<double> weights;
  double total = 0;

  double Probability(int32_t id) const;
  // The candidate at which the cumulative weight passes u * total, for u in [0, 1).
  int32_t Draw(double u) const;
};

// The distribution SampleToken draws from (same arguments).
TokenDistribution SamplingDistribution(absl::Span<const float> logits,
                                       const SamplingParams& params,
                                       absl::Span<const int32_t> history, size_t output_start);

// A uniform draw in [0, 1) fixed by (seed, step, stream): stream 0 is SampleToken's draw;
// speculative verification takes its acceptance tests from other streams, so every
// random choice of a seeded request is reproducible.
double SamplingUniform(uint64_t seed, uint64_t step, uint64_t stream = 0);

// For n > 0: log_softmax(logits)[token->id] and the top `n` of log_softmax(logits) (best
// first), what a SampledToken reports; nothing for n = 0 (see SampledToken::logprob).
void FillLogprobs(absl::Span<const float> logits, int n, SampledToken* token);

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
