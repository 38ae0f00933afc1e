#include "kernels/cpu/attention.h"

#include <cstdint>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/kv_cache_format.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/kernels/reference_util.h"

namespace tessera::kernels {
namespace {

using testing::RandomFloats;
using testing::SupportedLevels;

// A step over several sequences with a paged cache filled with random K and V everywhere,
// so reading a wrong slot changes the answer.
struct Scenario {
  KvCacheShape shape;
  int num_q_heads = 0;
  int q_stride = 0;
  std::vector<int32_t> query_start;
  std::vector<int32_t> context_lens;
  std::vector<int32_t> block_tables;
  int max_blocks = 0;
  int sliding_window = 0;
  std::vector<float> q, k_cache, v_cache;

  int num_seqs() const { return static_cast<int>(context_lens.size()); }
  int num_tokens() const { return query_start.back(); }
  AttentionBatch Batch() const {
    AttentionBatch b;
    b.num_seqs = num_seqs();
    b.num_tokens = num_tokens();
    b.query_start = query_start.data();
    b.context_lens = context_lens.data();
    b.block_tables = block_tables.data();
    b.max_blocks_per_seq = max_blocks;
    b.sliding_window = sliding_window;
    return b;
  }
};

// contexts[s] tokens in the cache after the step, of which new_tokens[s] are this step's.
Scenario MakeScenario(const std::vector<int>& contexts, const std::vector<int>& new_tokens,
                      int block_size, int num_kv_heads, int group, int head_dim,
                      uint32_t seed, float q_scale = 1.0f) {
  Scenario sc;
  sc.shape.block_size = block_size;
  sc.shape.num_kv_heads = num_kv_heads;
  sc.shape.head_dim = head_dim;
  sc.num_q_heads = num_kv_heads * group;
  // Rows like a fused QKV projection: the q heads first, then room for k and v.
  sc.q_stride = (sc.num_q_heads + 2 * num_kv_heads) * head_dim;
  sc.query_start.push_back(0);
  for (size_t s = 0; s < contexts.size(); ++s) {
    sc.context_lens.push_back(contexts[s]);
    sc.query_start.push_back(sc.query_start.back() + new_tokens[s]);
    sc.max_blocks = std::max(sc.max_blocks, (contexts[s] + block_size - 1) / block_size);
  }
  // Every sequence gets distinct blocks, handed out in shuffled order; block 0 is unused.
  const int total_blocks = sc.max_blocks * sc.num_seqs() + 1;
  std::vector<int32_t> ids(total_blocks - 1);
  std::iota(ids.begin(), ids.end(), 1);
  std::mt19937 rng(seed);
  std::shuffle(ids.begin(), ids.end(), rng);
  sc.block_tables.assign(static_cast<size_t>(sc.max_blocks) * sc.num_seqs(), 0);
  size_t next = 0;
  for (int s = 0; s < sc.num_seqs(); ++s) {
    const int needed = (contexts[s] + block_size - 1) / block_size;
    for (int b = 0; b < needed; ++b) sc.block_tables[s * sc.max_blocks + b] = ids[next++];
  }
  sc.shape.num_blocks = total_blocks;
  sc.q = RandomFloats(static_cast<size_t>(sc.num_tokens()) * sc.q_stride, seed + 1,
                      -q_scale, q_scale);
  sc.k_cache = RandomFloats(sc.shape.elements(), seed + 2);
  sc.v_cache = RandomFloats(sc.shape.elements(), seed + 3);
  return sc;
}

// Plain causal softmax attention in double, reading each position's slot straight from the
// block table. With a window, keys at p <= position - window get a -inf score (the mask
// transformers builds for Mistral), so the exp below makes them weigh exactly 0.
std::vector<double> Reference(const Scenario& sc, float scale) {
  const int hd = sc.shape.head_dim;
  const int bs = sc.shape.block_size;
  const int kv = sc.shape.num_kv_heads;
  const int group = sc.num_q_heads / kv;
  std::vector<double> out(static_cast<size_t>(sc.num_tokens()) * sc.num_q_heads * hd, 0.0);
  for (int s = 0; s < sc.num_seqs(); ++s) {
    const int n_new = sc.query_start[s + 1] - sc.query_start[s];
    for (int j = 0; j < n_new; ++j) {
      const int t = sc.query_start[s] + j;
      const int position = sc.context_lens[s] - n_new + j;
      for (int h = 0; h < sc.num_q_heads; ++h) {
        const float* q = &sc.q[static_cast<size_t>(t) * sc.q_stride + h * hd];
        std::vector<double> scores(position + 1);
        for (int p = 0; p <= position; ++p) {
          const int64_t slot =
              static_cast<int64_t>(sc.block_tables[s * sc.max_blocks + p / bs]) * bs + p % bs;
          const float* k = &sc.k_cache[(slot * kv + h / group) * hd];
          double dot = 0.0;
          for (int d = 0; d < hd; ++d) dot += static_cast<double>(q[d]) * k[d];
          const bool masked = sc.sliding_window > 0 && p <= position - sc.sliding_window;
          scores[p] = masked ? -INFINITY : dot * scale;
        }
        const double mx = *std::max_element(scores.begin(), scores.end());
        double sum = 0.0;
        for (double& x : scores) sum += (x = std::exp(x - mx));
        double* o = &out[(static_cast<size_t>(t) * sc.num_q_heads + h) * hd];
        for (int p = 0; p <= position; ++p) {
          const int64_t slot =
              static_cast<int64_t>(sc.block_tables[s * sc.max_blocks + p / bs]) * bs + p % bs;
          const float* v = &sc.v_cache[(slot * kv + h / group) * hd];
          for (int d = 0; d < hd; ++d) o[d] += scores[p] / sum * v[d];
        }
      }
    }
  }
  return out;
}

void ExpectMatches(const Scenario& sc, float scale, SimdLevel level, ThreadPool* pool,
                   const std::string& what) {
  const std::vector<double> ref = Reference(sc, scale);
  std::vector<float> out(ref.size(), std::nanf(""));
  PagedAttentionAtLevel(level, sc.q.data(), sc.q_stride, sc.Batch(), sc.k_cache.data(),
                        sc.v_cache.data(), sc.shape, sc.num_q_heads, scale, out.data(), pool);
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_NEAR(out[i], ref[i], 2e-5) << what << " " << SimdLevelName(level) << " element "
                                      << i;
  }
}

class PagedAttentionTest : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

// 17 sequences mixing decode steps (one new token) and prefill chunks over a cached prefix
// (or from scratch), on shuffled, non-contiguous block tables.
TEST_P(PagedAttentionTest, MixedDecodeAndPrefillMatchesReference) {
  const auto [block_size, group, threads] = GetParam();
  std::vector<int> contexts, new_tokens;
  for (int s = 0; s < 17; ++s) {
    const int context = s % 4 == 3 ? 97 - 3 * s : 97;
    contexts.push_back(context);
    if (s % 3 == 0) {
      new_tokens.push_back(1);  // Decode.
    } else if (s % 3 == 1) {
      new_tokens.push_back(1 + s % 7 * 3);  // Chunk after a cached prefix.
    } else {
      new_tokens.push_back(s == 2 ? context : 5);  // Whole prompt at once, or a chunk.
    }
  }
  ThreadPool pool(threads);
  for (int head_dim : {64, 128, 20}) {
    const Scenario sc = MakeScenario(contexts, new_tokens, block_size, /*num_kv_heads=*/2,
                                     group, head_dim, 100 + head_dim);
    const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    for (SimdLevel level : SupportedLevels()) {
      ExpectMatches(sc, scale, level, &pool, "head_dim " + std::to_string(head_dim));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(BlockSizesGqaThreads, PagedAttentionTest,
                         ::testing::Combine(::testing::Values(1, 16), ::testing::Values(1, 2, 4),
                                            ::testing::Values(1, 3)),
                         [](const auto& info) {
                           return "block" + std::to_string(std::get<0>(info.param)) + "_gqa" +
                                  std::to_string(std::get<1>(info.param)) + "_" +
                                  std::to_string(std::get<2>(info.param)) + "threads";
                         });

TEST(PagedAttentionLongTest, LongContextDecodeAndChunk) {
  const Scenario sc = MakeScenario({3000, 2500}, {1, 6}, 16, 2, 4, 64, 7);
  ThreadPool pool(3);
  for (SimdLevel level : SupportedLevels()) {
    ExpectMatches(sc, 0.125f, level, &pool, "long context");
  }
}

// Sliding windows shorter than, equal to and longer than the contexts, on block sizes that
// put the window's first key mid-block, for decode steps and prefill chunks alike.
TEST(PagedAttentionWindowTest, MatchesMaskedReference) {
  ThreadPool pool(3);
  for (int block_size : {1, 5, 16}) {
    for (int window : {1, 7, 16, 40, 97, 500}) {
      Scenario sc = MakeScenario({97, 60, 33, 97, 12}, {1, 1, 33, 20, 12}, block_size, 2, 2,
                                 32, 50 + window);
      sc.sliding_window = window;
      for (SimdLevel level : SupportedLevels()) {
        ExpectMatches(sc, 0.2f, level, &pool,
                      "block " + std::to_string(block_size) + " window " +
                          std::to_string(window));
      }
    }
  }
}

// A window changes the answer (the test above cannot pass by ignoring it).
TEST(PagedAttentionWindowTest, WindowChangesTheOutput) {
  Scenario sc = MakeScenario({50}, {1}, 16, 1, 1, 16, 3);
  std::vector<float> full(16), windowed(16);
  PagedAttention(sc.q.data(), sc.q_stride, sc.Batch(), sc.k_cache.data(), sc.v_cache.data(),
                 sc.shape, 1, 0.25f, full.data(), nullptr);
  sc.sliding_window = 10;
  PagedAttention(sc.q.data(), sc.q_stride, sc.Batch(), sc.k_cache.data(), sc.v_cache.data(),
                 sc.shape, 1, 0.25f, windowed.data(), nullptr);
  EXPECT_NE(full, windowed);
  sc.sliding_window = 50;  // Covers the whole context: same as none.
  PagedAttention(sc.q.data(), sc.q_stride, sc.Batch(), sc.k_cache.data(), sc.v_cache.data(),
                 sc.shape, 1, 0.25f, windowed.data(), nullptr);
  EXPECT_EQ(full, windowed);
}

// Scores in the hundreds overflow exp() without the max subtraction.
TEST(PagedAttentionLongTest, LargeScoresStayFinite) {
  const Scenario sc = MakeScenario({200, 40}, {1, 40}, 16, 1, 2, 32, 9, /*q_scale=*/30.0f);
  for (SimdLevel level : SupportedLevels()) {
    ExpectMatches(sc, 1.0f, level, nullptr, "large scores");
  }
}

// The cache in BF16 or FP8: the kernels must read exactly what WriteKvCache stored, so the
// reference runs on the stored values read back as floats (the rounding itself is the
// quality tests' business: kv_cache_format_test, kv_cache_dtype_quality_test).
struct QuantizedCaches {
  std::vector<uint8_t> k, v;
  Scenario dequantized;
};

QuantizedCaches Quantize(const Scenario& sc, DType dtype) {
  QuantizedCaches out;
  out.dequantized = sc;
  out.dequantized.shape.dtype = DType::kF32;
  KvCacheShape shape = sc.shape;
  shape.dtype = dtype;
  out.k.assign(shape.bytes(), 0);
  out.v.assign(shape.bytes(), 0);
  const int64_t slots = static_cast<int64_t>(shape.num_blocks) * shape.block_size;
  const int hd = shape.head_dim;
  for (int64_t slot = 0; slot < slots; ++slot) {
    for (int h = 0; h < shape.num_kv_heads; ++h) {
      const int64_t at = KvRowIndex(shape, slot, h);
      StoreKvRow(&sc.k_cache[at], shape, slot, h, out.k.data());
      StoreKvRow(&sc.v_cache[at], shape, slot, h, out.v.data());
      LoadKvRow(out.k.data(), shape, slot, h, &out.dequantized.k_cache[at]);
      LoadKvRow(out.v.data(), shape, slot, h, &out.dequantized.v_cache[at]);
    }
  }
  return out;
}

class QuantizedCacheAttentionTest : public ::testing::TestWithParam<DType> {};

TEST_P(QuantizedCacheAttentionTest, ReadsTheStoredValues) {
  const DType dtype = GetParam();
  ThreadPool pool(3);
  for (int head_dim : {32, 64, 128, 20}) {
    for (int group : {1, 4}) {
      Scenario sc = MakeScenario({97, 40, 300}, {1, 40, 7}, 16, 2, group, head_dim,
                                 200 + head_dim + group);
      // Rows of very different magnitudes per head, as real K rows have.
      for (size_t i = 0; i < sc.k_cache.size(); ++i) sc.k_cache[i] *= 1.0f + (i / head_dim) % 7;
      const QuantizedCaches q = Quantize(sc, dtype);
      const std::vector<double> ref = Reference(q.dequantized, 0.125f);
      KvCacheShape shape = sc.shape;
      shape.dtype = dtype;
      for (SimdLevel level : SupportedLevels()) {
        std::vector<float> out(ref.size(), std::nanf(""));
        PagedAttentionAtLevel(level, sc.q.data(), sc.q_stride, sc.Batch(), q.k.data(),
                              q.v.data(), shape, sc.num_q_heads, 0.125f, out.data(), &pool);
        for (size_t i = 0; i < ref.size(); ++i) {
          ASSERT_NEAR(out[i], ref[i], 3e-5)
              << DTypeName(dtype) << " " << SimdLevelName(level) << " head_dim " << head_dim
              << " group " << group << " element " << i;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(CacheTypes, QuantizedCacheAttentionTest,
                         ::testing::Values(DType::kBF16, DType::kF8E4M3),
                         [](const auto& info) {
                           return info.param == DType::kBF16 ? std::string("bf16")
                                                             : std::string("fp8");
                         });

}  // namespace
}  // namespace tessera::kernels
