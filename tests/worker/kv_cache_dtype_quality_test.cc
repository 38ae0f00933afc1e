// Quality and size of the 16-bit and FP8 KV caches at the model level: stories260K (a
// trained model, F32) run teacher-forced over its reference continuation with an F32,
// a BF16 and an FP8 cache. The prompt's K and V go through the cache within the step, so
// every attention read sees the rounded values.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <vector>

#include "common/quantization.h"
#include "gtest/gtest.h"
#include "tests/support/test_model.h"
#include "tests/worker/teacher_forcing.h"
#include "worker/communicator.h"
#include "worker/llama_model.h"

namespace tessera {
namespace {

struct CacheRun {
  std::vector<float> logits;  // [positions, vocab]
  size_t cache_bytes = 0;
  size_t bytes_per_block = 0;
  int head_dim = 0;
};

CacheRun TeacherForced(KvCacheDType kv, const std::vector<int32_t>& tokens) {
  auto backend = kernels::MakeCpuBackend(2);
  SingleRankCommunicator comm;
  ModelLoadOptions options;
  options.kv_cache_dtype = kv;
  auto model = LlamaModel::Load(testing::StoriesModelDir(), backend.get(), &comm, nullptr, options);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return {};
  CacheRun run;
  run.logits = testing::TeacherForcedLogits(**model, tokens);
  run.bytes_per_block = (*model)->KvBytesPerBlock(16);
  auto cache = (*model)->CreateKvCache(8, 16);
  EXPECT_TRUE(cache.ok()) << cache.status();
  if (cache.ok()) run.cache_bytes = (*cache)->bytes();
  run.head_dim = (*model)->config().head_dim;
  return run;
}

// Also returns in *worst the largest logit difference and in *widest_flip the widest
// margin (reference top-1 minus top-2) of a position whose choice changed.
double Top1Agreement(const std::vector<float>& a, const std::vector<float>& b, size_t vocab,
                     double* worst, double* widest_flip) {
  const size_t rows = a.size() / vocab;
  int agree = 0;
  *worst = 0.0;
  *widest_flip = 0.0;
  for (size_t r = 0; r < rows; ++r) {
    const float* x = &a[r * vocab];
    const float* y = &b[r * vocab];
    const bool same = std::max_element(x, x + vocab) - x == std::max_element(y, y + vocab) - y;
    agree += same;
    if (!same) {
      std::vector<float> sorted(x, x + vocab);
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
      std::printf("position %zu: top-1 differs; reference margin between its top two %.4f\n", r,
                  sorted[0] - sorted[1]);
      *widest_flip = std::max(*widest_flip, double{sorted[0] - sorted[1]});
    }
    for (size_t v = 0; v < vocab; ++v) *worst = std::max(*worst, double{std::fabs(x[v] - y[v])});
  }
  return static_cast<double>(agree) / rows;
}

TEST(KvCacheDTypeQualityTest, Bf16AndFp8CachesKeepTheNextTokenChoicesAndShrink) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const std::vector<int32_t> tokens = testing::ReferenceTokens();
  const CacheRun f32 = TeacherForced(KvCacheDType::kF32, tokens);
  const CacheRun bf16 = TeacherForced(KvCacheDType::kBF16, tokens);
  const CacheRun fp8 = TeacherForced(KvCacheDType::kFp8, tokens);
  ASSERT_FALSE(f32.logits.empty());
  ASSERT_EQ(f32.logits.size(), bf16.logits.size());
  ASSERT_EQ(f32.logits.size(), fp8.logits.size());
  const size_t vocab = f32.logits.size() / tokens.size();

  double worst_bf16 = 0.0, worst_fp8 = 0.0, flip_bf16 = 0.0, flip_fp8 = 0.0;
  const double agree_bf16 = Top1Agreement(f32.logits, bf16.logits, vocab, &worst_bf16, &flip_bf16);
  const double agree_fp8 = Top1Agreement(f32.logits, fp8.logits, vocab, &worst_fp8, &flip_fp8);
  std::printf("KV cache vs F32 over %zu positions: bf16 top-1 %.4f (max |logit diff| %.4g), "
              "fp8 top-1 %.4f (%.4g); bytes per block %zu / %zu / %zu\n",
              tokens.size(), agree_bf16, worst_bf16, agree_fp8, worst_fp8, f32.bytes_per_block,
              bf16.bytes_per_block, fp8.bytes_per_block);
  // BF16 keeps every choice. E4M3 keeps 3 mantissa bits: on this 5-layer model with
  // 8-wide heads it moves logits by up to ~2 (of a +-15 range) and flips a near-tie (one
  // of 65 positions measured, margin 0.24): allowed are flips between candidates within
  // half a logit of each other, and at most 2 % of positions. The 99 % gate over a real
  // text set is `tessera eval`'s job.
  EXPECT_GE(agree_bf16, 0.99);
  EXPECT_GE(agree_fp8, 0.98);
  EXPECT_LT(flip_fp8, 0.5);
  EXPECT_GT(worst_bf16, 0.0);  // The cache really was rounded.
  EXPECT_LT(worst_bf16, worst_fp8);
  EXPECT_LT(worst_fp8, 3.0);

  // BF16 halves the bytes a token takes; FP8 quarters them plus a float per head.
  EXPECT_EQ(bf16.bytes_per_block * 2, f32.bytes_per_block);
  EXPECT_EQ(bf16.cache_bytes * 2, f32.cache_bytes);
  const size_t elements = f32.bytes_per_block / sizeof(float);
  EXPECT_EQ(fp8.bytes_per_block, elements + elements / f32.head_dim * sizeof(float));
}

}  // namespace
}  // namespace tessera
