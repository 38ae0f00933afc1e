#ifndef TESSERA_WORKER_SINGLE_SEQUENCE_H_
#define TESSERA_WORKER_SINGLE_SEQUENCE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/sampling_params.h"
#include "worker/kv_cache.h"
#include "worker/llama_model.h"

namespace tessera {

// Generation of one sequence without a scheduler, for `tessera run`, tests and
// benchmarks: the sequence owns KV blocks 1..n in order (block 0 stays reserved).
struct SingleSequenceOptions {
  int max_new_tokens = 16;
  SamplingParams sampling;
  bool ignore_eos = false;
  // Ids that end generation; empty: the model's config.json eos ids.
  std::vector<int32_t> stop_token_ids;
  int prefill_chunk = 0;  // Tokens per prefill step; 0: the whole prompt at once.
};

struct SingleSequenceResult {
  std::vector<int32_t> generated_ids;
  std::string finish_reason;          // "length" or "eos".
  std::vector<float> first_logits;    // Logits that chose the first generated token.
  double prefill_seconds = 0;
  double decode_seconds = 0;          // All decode steps together.
  int decode_steps = 0;
};

// Calls `on_token` after each generated token (for streaming output).
absl::StatusOr<SingleSequenceResult> GenerateSingleSequence(
    LlamaModel& model, KvCache& cache, const std::vector<int32_t>& prompt_ids,
    const SingleSequenceOptions& options,
    const std::function<void(int32_t)>& on_token = nullptr);

}  // namespace tessera

#endif  // TESSERA_WORKER_SINGLE_SEQUENCE_H_
