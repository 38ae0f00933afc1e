#ifndef TESSERA_TESTS_WORKER_TEACHER_FORCING_H_
#define TESSERA_TESTS_WORKER_TEACHER_FORCING_H_

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "tests/worker/test_expected.h"
#include "worker/llama_model.h"

// The quality tests' shared driver: a model run teacher-forced over a token sequence in
// one prefill step, so every attention read goes through the KV cache.
namespace tessera::testing {

// stories260K's reference prompt followed by its reference continuation.
inline std::vector<int32_t> ReferenceTokens() {
  const Expected expected = LoadExpected();
  std::vector<int32_t> tokens = expected.prompt_ids;
  tokens.insert(tokens.end(), expected.generated_ids.begin(), expected.generated_ids.end());
  return tokens;
}

// Next-token logits after every position of `tokens` ([tokens, vocab]), in one step on a
// fresh cache (block 0 stays reserved, as the scheduler keeps it).
inline std::vector<float> TeacherForcedLogits(LlamaModel& model,
                                              const std::vector<int32_t>& tokens) {
  const int block_size = 16;
  const int blocks = (static_cast<int>(tokens.size()) + block_size - 1) / block_size;
  auto cache = model.CreateKvCache(blocks + 1, block_size);
  EXPECT_TRUE(cache.ok()) << cache.status();
  if (!cache.ok()) return {};
  std::vector<int32_t> table(blocks);
  for (int b = 0; b < blocks; ++b) table[b] = b + 1;
  StepBatch batch;
  batch.max_blocks_per_seq = blocks;
  batch.AddSequence(tokens, table, 0, static_cast<int>(tokens.size()), block_size, false);
  for (int i = 0; i < batch.num_tokens(); ++i) batch.logits_rows.push_back(i);
  std::vector<float> logits;
  const absl::Status s = model.Forward(batch, cache->get(), &logits);
  EXPECT_TRUE(s.ok()) << s;
  return logits;
}

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_WORKER_TEACHER_FORCING_H_
