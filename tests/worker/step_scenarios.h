#ifndef TESSERA_TESTS_WORKER_STEP_SCENARIOS_H_
#define TESSERA_TESTS_WORKER_STEP_SCENARIOS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "worker/step_batch.h"

namespace tessera::testing {

// Four steps over four sequences with 16-token blocks, every kind a server runs: a
// prefill (two prompts whole, another's first chunk), a mixed step (two decodes, a chunk,
// a whole prompt), a speculative verification (three decodes, then a sequence checking
// drafts with logits at every token) and a decode of four. `variant` picks other tokens
// and blocks (1 + 16 * variant onwards, so block 0, the null block, stays free) for steps
// of the same shapes.
inline std::vector<std::pair<std::string, StepBatch>> FourStepScenario(int variant = 0) {
  constexpr int kBlockSize = 16;
  std::vector<int32_t> a(60), b(60), c(60), d(60);
  for (int i = 0; i < 60; ++i) {
    a[i] = 1 + (i * 7 + variant * 31) % 500;
    b[i] = 1 + (i * 13 + 3 + variant * 17) % 500;
    c[i] = 1 + (i * 29 + 11 + variant * 5) % 500;
    d[i] = 1 + (i * 3 + 101 + variant * 7) % 500;
  }
  const int base = 1 + 16 * variant;
  std::vector<int32_t> blocks_a, blocks_b, blocks_c, blocks_d;
  for (int i = 0; i < 4; ++i) {
    blocks_a.push_back(base + i);
    blocks_b.push_back(base + 4 + i);
    blocks_c.push_back(base + 8 + i);
    blocks_d.push_back(base + 12 + i);
  }
  auto batch = [] {
    StepBatch s;
    s.max_blocks_per_seq = 4;
    return s;
  };
  std::vector<std::pair<std::string, StepBatch>> steps;
  StepBatch s1 = batch();
  s1.AddSequence(a, blocks_a, 0, 23, kBlockSize, true);
  s1.AddSequence(b, blocks_b, 0, 9, kBlockSize, false);
  s1.AddSequence(d, blocks_d, 0, 5, kBlockSize, true);
  steps.emplace_back("prefill", std::move(s1));
  StepBatch s2 = batch();
  s2.AddSequence(a, blocks_a, 23, 24, kBlockSize, true);
  s2.AddSequence(d, blocks_d, 5, 6, kBlockSize, true);
  s2.AddSequence(b, blocks_b, 9, 30, kBlockSize, true);
  s2.AddSequence(c, blocks_c, 0, 17, kBlockSize, true);
  steps.emplace_back("mixed", std::move(s2));
  // Three decodes pad to four, so the verifying sequence's rows move up by one.
  StepBatch s3 = batch();
  s3.AddSequence(b, blocks_b, 30, 31, kBlockSize, true);
  s3.AddSequence(c, blocks_c, 17, 18, kBlockSize, true);
  s3.AddSequence(d, blocks_d, 6, 7, kBlockSize, true);
  s3.AddSequence(a, blocks_a, 24, 28, kBlockSize, false);
  s3.logits_rows = {0, 1, 2, 3, 4, 5, 6};
  steps.emplace_back("verify", std::move(s3));
  StepBatch s4 = batch();
  s4.AddSequence(a, blocks_a, 28, 29, kBlockSize, true);
  s4.AddSequence(b, blocks_b, 31, 32, kBlockSize, true);
  s4.AddSequence(c, blocks_c, 18, 19, kBlockSize, true);
  s4.AddSequence(d, blocks_d, 7, 8, kBlockSize, true);
  steps.emplace_back("decode", std::move(s4));
  return steps;
}

// Largest |got - want| / (1 + |want|) over the first rows of `got`, and whether every row's
// argmax agrees.
struct RowComparison {
  float worst = 0;
  bool same_argmax = true;
};
inline RowComparison CompareRows(const std::vector<float>& want, const std::vector<float>& got,
                                 size_t rows, size_t vocab) {
  RowComparison result;
  for (size_t r = 0; r < rows; ++r) {
    const float* w = &want[r * vocab];
    const float* g = &got[r * vocab];
    size_t wi = 0, gi = 0;
    for (size_t v = 0; v < vocab; ++v) {
      const float d = w[v] - g[v];
      result.worst = std::max(result.worst, (d < 0 ? -d : d) / (1.0f + (w[v] < 0 ? -w[v] : w[v])));
      if (w[v] > w[wi]) wi = v;
      if (g[v] > g[gi]) gi = v;
    }
    result.same_argmax = result.same_argmax && wi == gi;
  }
  return result;
}

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_WORKER_STEP_SCENARIOS_H_
