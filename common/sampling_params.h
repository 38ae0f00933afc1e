#ifndef TESSERA_COMMON_SAMPLING_PARAMS_H_
#define TESSERA_COMMON_SAMPLING_PARAMS_H_

#include <cstdint>

#include "absl/status/status.h"

namespace tessera {

// How the next token is drawn from the logits. Defaults reproduce plain sampling at
// temperature 1; temperature 0 means greedy.
struct SamplingParams {
  float temperature = 1.0f;
  int top_k = 0;          // 0: no limit.
  float top_p = 1.0f;     // In (0, 1].
  float min_p = 0.0f;     // In [0, 1).
  uint64_t seed = 0;
  bool has_seed = false;  // Without a seed each request draws a random one.
  float repetition_penalty = 1.0f;  // > 0; 1 disables.
  float presence_penalty = 0.0f;    // In [-2, 2].
  float frequency_penalty = 0.0f;   // In [-2, 2].
  int num_logprobs = 0;             // Top-n log-probabilities per token (0: none).

  bool greedy() const { return temperature == 0.0f; }
  // INVALID_ARGUMENT naming the field and the value for impossible settings.
  absl::Status Validate(int vocab_size) const;
};

}  // namespace tessera

#endif  // TESSERA_COMMON_SAMPLING_PARAMS_H_
