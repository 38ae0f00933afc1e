#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/kv_cache_format.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/kernels/reference_util.h"

namespace tessera::kernels {
namespace {

using testing::MakeStoredMatrix;
using testing::RandomFloats;
using testing::StoredMatrix;

// Every op runs on the calling thread alone (null pool) and on a pool of 3.
class ElementwiseTest : public ::testing::TestWithParam<int> {
 protected:
  ElementwiseTest() : pool_(GetParam()) {}
  ThreadPool* pool() { return GetParam() == 1 ? nullptr : &pool_; }
  ThreadPool pool_;
};

std::vector<double> RmsNormReference(const std::vector<float>& x, const std::vector<float>& w,
                                     int n, int dim, float eps) {
  std::vector<double> out(x.size());
  for (int i = 0; i < n; ++i) {
    double ss = 0.0;
    for (int d = 0; d < dim; ++d) ss += static_cast<double>(x[i * dim + d]) * x[i * dim + d];
    const double inv = 1.0 / std::sqrt(ss / dim + eps);
    for (int d = 0; d < dim; ++d) out[i * dim + d] = x[i * dim + d] * inv * w[d];
  }
  return out;
}

TEST_P(ElementwiseTest, RmsNormMatchesReference) {
  for (int dim : {1, 7, 513, 4096}) {
    for (int n : {1, 3, 17}) {
      const std::vector<float> x = RandomFloats(static_cast<size_t>(n) * dim, dim + n, -3, 3);
      const std::vector<float> w = RandomFloats(dim, dim);
      std::vector<float> out(x.size());
      RmsNorm(x.data(), w.data(), n, dim, 1e-5f, out.data(), pool());
      const std::vector<double> ref = RmsNormReference(x, w, n, dim, 1e-5f);
      for (size_t i = 0; i < ref.size(); ++i) {
        ASSERT_NEAR(out[i], ref[i], 1e-6 * std::fabs(ref[i]) + 1e-7) << "dim " << dim;
      }
    }
  }
}

TEST_P(ElementwiseTest, AddRmsNormUpdatesResidualThenNormalises) {
  const int n = 5, dim = 300;
  std::vector<float> hidden = RandomFloats(n * dim, 1);
  const std::vector<float> delta = RandomFloats(n * dim, 2);
  const std::vector<float> w = RandomFloats(dim, 3);
  std::vector<float> sum(hidden.size());
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = hidden[i] + delta[i];
  std::vector<float> out(hidden.size());
  AddRmsNorm(hidden.data(), delta.data(), w.data(), n, dim, 1e-6f, out.data(), pool());
  EXPECT_EQ(hidden, sum);
  const std::vector<double> ref = RmsNormReference(sum, w, n, dim, 1e-6f);
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_NEAR(out[i], ref[i], 1e-6 * std::fabs(ref[i]) + 1e-7);
  }
}

TEST_P(ElementwiseTest, RopeRotatesQAndKHeadsOnly) {
  for (int head_dim : {64, 6}) {
    for (float theta : {10000.0f, 500000.0f}) {
      const int nq = 4, nkv = 2, n = 6;
      // q, k, then v heads that must stay untouched.
      const int stride = (nq + 2 * nkv) * head_dim;
      const std::vector<int32_t> positions = {0, 1, 17, 4095, 32767, 131071};
      const std::vector<float> original = RandomFloats(n * stride, head_dim);
      std::vector<float> qkv = original;
      const int half = head_dim / 2;
      std::vector<float> inv_freq(half);
      for (int i = 0; i < half; ++i) {
        inv_freq[i] =
            static_cast<float>(std::pow(static_cast<double>(theta), -2.0 * i / head_dim));
      }
      const float scale = theta == 10000.0f ? 1.0f : 1.1386f;  // yarn-like cos/sin scale
      Rope(qkv.data(), n, stride, positions.data(), nq, nkv, head_dim, inv_freq.data(), scale,
           pool());
      for (int r = 0; r < n; ++r) {
        for (int h = 0; h < nq + 2 * nkv; ++h) {
          const float* in = &original[r * stride + h * head_dim];
          const float* got = &qkv[r * stride + h * head_dim];
          for (int i = 0; i < half; ++i) {
            double c = 1.0, s = 0.0;
            if (h < nq + nkv) {
              // The angle is a float32 product, as in transformers.
              const float angle = static_cast<float>(positions[r]) * inv_freq[i];
              c = std::cos(static_cast<double>(angle)) * scale;
              s = std::sin(static_cast<double>(angle)) * scale;
            }
            const double x0 = in[i], x1 = in[i + half];
            const double tol = 2e-6 * (std::fabs(x0) + std::fabs(x1));
            ASSERT_NEAR(got[i], x0 * c - x1 * s, tol) << "row " << r << " head " << h;
            ASSERT_NEAR(got[i + half], x1 * c + x0 * s, tol) << "row " << r << " head " << h;
          }
        }
      }
    }
  }
}

TEST_P(ElementwiseTest, AddBiasAddsToEveryRow) {
  for (int dim : {1, 7, 3000}) {
    const int n = 5;
    const std::vector<float> y0 = RandomFloats(n * dim, dim);
    const std::vector<float> bias = RandomFloats(dim, dim + 1);
    std::vector<float> y = y0;
    AddBias(y.data(), bias.data(), n, dim, pool());
    for (int r = 0; r < n; ++r) {
      for (int j = 0; j < dim; ++j) {
        ASSERT_EQ(y[r * dim + j], y0[r * dim + j] + bias[j]) << "row " << r << " col " << j;
      }
    }
  }
}

TEST_P(ElementwiseTest, SiluMulMatchesReference) {
  for (int inter : {1, 13, 40000}) {
    const int n = 3;
    const std::vector<float> gate_up = RandomFloats(2 * n * inter, inter, -8, 8);
    std::vector<float> out(n * inter);
    SiluMul(gate_up.data(), n, inter, out.data(), pool());
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < inter; ++j) {
        const double g = gate_up[2 * i * inter + j];
        const double ref = g / (1.0 + std::exp(-g)) * gate_up[2 * i * inter + inter + j];
        ASSERT_NEAR(out[i * inter + j], ref, 1e-6 * std::fabs(ref) + 1e-7);
      }
    }
  }
}

TEST_P(ElementwiseTest, AddAccumulates) {
  std::vector<float> y = RandomFloats(300001, 1);
  const std::vector<float> x = RandomFloats(300001, 2);
  std::vector<float> expected(y.size());
  for (size_t i = 0; i < y.size(); ++i) expected[i] = y[i] + x[i];
  Add(y.data(), x.data(), y.size(), pool());
  EXPECT_EQ(y, expected);
}

TEST_P(ElementwiseTest, EmbeddingGatherReadsOwnShardAndZeroesTheRest) {
  const int rows = 10, cols = 37;
  const int64_t vocab_begin = 20;  // This shard holds ids [20, 30).
  const std::vector<int32_t> ids = {20, 29, 25, 19, 30, -1, 1000000, 22};
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const StoredMatrix table = MakeStoredMatrix(rows * cols, dtype, 5);
    std::vector<float> out(ids.size() * cols, std::nanf(""));
    EmbeddingGather(ids.data(), static_cast<int>(ids.size()),
                    MatrixView{table.bytes.data(), dtype, rows, cols}, vocab_begin, out.data(),
                    pool());
    for (size_t i = 0; i < ids.size(); ++i) {
      const int64_t row = ids[i] - vocab_begin;
      for (int c = 0; c < cols; ++c) {
        const float expected = (row >= 0 && row < rows) ? table.values[row * cols + c] : 0.0f;
        ASSERT_EQ(out[i * cols + c], expected) << DTypeName(dtype) << " id " << ids[i];
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, ElementwiseTest, ::testing::Values(1, 3));

TEST(WriteKvCacheTest, StoresRowsAtTheirSlotsOnly) {
  KvCacheShape shape;
  shape.num_blocks = 4;
  shape.block_size = 3;
  shape.num_kv_heads = 2;
  shape.head_dim = 5;
  const int row = shape.num_kv_heads * shape.head_dim;
  const int stride = row + 7;  // Rows come from a wider QKV buffer.
  const std::vector<int64_t> slots = {4, 11, 0, -1, 12};  // -1: padding; 12: past the end.
  const int n = static_cast<int>(slots.size());
  const std::vector<float> k = RandomFloats(n * stride, 1);
  const std::vector<float> v = RandomFloats(n * stride, 2);
  std::vector<float> k_cache(shape.elements(), -7.0f), v_cache(shape.elements(), -7.0f);
  WriteKvCache(k.data(), v.data(), stride, slots.data(), n, shape, k_cache.data(),
               v_cache.data());
  std::vector<float> k_expected(shape.elements(), -7.0f), v_expected(shape.elements(), -7.0f);
  for (int i = 0; i < 3; ++i) {
    std::memcpy(&k_expected[slots[i] * row], &k[i * stride], row * sizeof(float));
    std::memcpy(&v_expected[slots[i] * row], &v[i * stride], row * sizeof(float));
  }
  EXPECT_EQ(k_cache, k_expected);
  EXPECT_EQ(v_cache, v_expected);
}

// 16-bit and FP8 caches: each stored row reads back within the format's rounding (BF16:
// half an ulp; FP8: half a step of 3 mantissa bits, relative to the row's own scale, so a
// small head next to a large one keeps its precision), padding slots stay untouched.
TEST(WriteKvCacheTest, QuantizedRowsReadBackWithinTheirRounding) {
  for (DType dtype : {DType::kBF16, DType::kF8E4M3}) {
    KvCacheShape shape;
    shape.num_blocks = 3;
    shape.block_size = 4;
    shape.num_kv_heads = 3;
    shape.head_dim = 32;
    shape.dtype = dtype;
    const int row = shape.num_kv_heads * shape.head_dim;
    const std::vector<int64_t> slots = {5, 0, -1, 11};
    const int n = static_cast<int>(slots.size());
    std::vector<float> k = RandomFloats(n * row, 3), v = RandomFloats(n * row, 4);
    for (int i = 0; i < n * row; ++i) {  // Head h of a token spans 1e-3 .. 1e2.
      const float magnitude = std::pow(10.0f, static_cast<float>((i / shape.head_dim) % 3) * 2.5f - 3.0f);
      k[i] *= magnitude;
      v[i] *= magnitude;
    }
    std::vector<uint8_t> k_cache(shape.bytes(), 0xAB), v_cache(shape.bytes(), 0xAB);
    WriteKvCache(k.data(), v.data(), row, slots.data(), n, shape, k_cache.data(), v_cache.data());
    std::vector<float> back(shape.head_dim);
    for (int i = 0; i < n; ++i) {
      if (slots[i] < 0) continue;
      for (int h = 0; h < shape.num_kv_heads; ++h) {
        const float* src = &k[i * row + h * shape.head_dim];
        float amax = 0.0f;
        for (int d = 0; d < shape.head_dim; ++d) amax = std::max(amax, std::fabs(src[d]));
        LoadKvRow(k_cache.data(), shape, slots[i], h, back.data());
        for (int d = 0; d < shape.head_dim; ++d) {
          const float bound = dtype == DType::kBF16 ? std::fabs(src[d]) / 256.0f
                                                    : std::max(std::fabs(src[d]) / 16.0f,
                                                               amax / 448.0f / 512.0f);
          ASSERT_LE(std::fabs(back[d] - src[d]), bound * 1.0001f)
              << DTypeName(dtype) << " token " << i << " head " << h << " dim " << d;
        }
        if (dtype == DType::kF8E4M3) {  // The row's largest value maps to 448 exactly.
          EXPECT_FLOAT_EQ(KvScales(k_cache.data(), shape)[slots[i] * shape.num_kv_heads + h],
                          amax / 448.0f);
        }
      }
    }
    // Slot 1 was never written: its bytes are still the fill pattern.
    const size_t elem = DTypeSize(dtype);
    EXPECT_EQ(k_cache[KvRowIndex(shape, 1, 0) * elem], 0xAB);
  }
}

}  // namespace
}  // namespace tessera::kernels
