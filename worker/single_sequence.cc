#include "worker/single_sequence.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/sampler.h"

namespace tessera {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A step computing tokens [begin, end) of `tokens`, the sequence owning blocks 1..n.
StepBatch MakeStep(const std::vector<int32_t>& tokens, const std::vector<int32_t>& blocks,
                   int begin, int end, int block_size) {
  StepBatch b;
  b.max_blocks_per_seq = static_cast<int>(blocks.size());
  b.AddSequence(tokens, blocks, begin, end, block_size, /*wants_logits=*/true);
  return b;
}

}  // namespace

absl::StatusOr<SingleSequenceResult> GenerateSingleSequence(
    LlamaModel& model, KvCache& cache, const std::vector<int32_t>& prompt_ids,
    const SingleSequenceOptions& options, const std::function<void(int32_t)>& on_token) {
  const ModelConfig& config = model.config();
  const int block_size = cache.shape().block_size;
  const int max_blocks = cache.shape().num_blocks - 1;
  std::vector<int32_t> blocks(max_blocks);
  std::iota(blocks.begin(), blocks.end(), 1);  // Block 0 stays reserved.
  const int capacity = std::min(max_blocks * block_size, config.max_position_embeddings);
  const int prompt_len = static_cast<int>(prompt_ids.size());
  if (prompt_len == 0) return absl::InvalidArgumentError("prompt is empty");
  if (prompt_len + options.max_new_tokens > capacity) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt of ", prompt_len, " tokens + max_new_tokens ", options.max_new_tokens,
        " exceeds the context of ", capacity, " tokens"));
  }
  RETURN_IF_ERROR(options.sampling.Validate(config.vocab_size));

  SingleSequenceResult result;
  std::vector<int32_t> tokens = prompt_ids;
  std::vector<float> logits;
  const int chunk = options.prefill_chunk > 0 ? options.prefill_chunk : prompt_len;
  auto start = std::chrono::steady_clock::now();
  for (int begin = 0; begin < prompt_len; begin += chunk) {
    const int end = std::min(prompt_len, begin + chunk);
    RETURN_IF_ERROR(model.Forward(MakeStep(tokens, blocks, begin, end, block_size), &cache,
                                  &logits));
  }
  result.prefill_seconds = SecondsSince(start);
  result.first_logits = logits;
  start = std::chrono::steady_clock::now();
  const std::vector<int32_t>& stop_ids =
      options.stop_token_ids.empty() ? config.eos_token_ids : options.stop_token_ids;
  while (true) {
    const SampledToken next = SampleToken(logits, options.sampling, tokens, prompt_len,
                                          result.generated_ids.size());
    tokens.push_back(next.id);
    result.generated_ids.push_back(next.id);
    if (on_token) on_token(next.id);
    const bool eos = std::find(stop_ids.begin(), stop_ids.end(), next.id) != stop_ids.end();
    if (eos && !options.ignore_eos) {
      result.finish_reason = "eos";
      break;
    }
    if (static_cast<int>(result.generated_ids.size()) >= options.max_new_tokens) {
      result.finish_reason = "length";
      break;
    }
    const int len = static_cast<int>(tokens.size());
    RETURN_IF_ERROR(model.Forward(MakeStep(tokens, blocks, len - 1, len, block_size), &cache,
                                  &logits));
    ++result.decode_steps;
  }
  result.decode_seconds = SecondsSince(start);
  return result;
}

}  // namespace tessera
