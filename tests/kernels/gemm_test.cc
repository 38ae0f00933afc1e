#include "kernels/cpu/gemm.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/kernels/reference_util.h"

namespace tessera::kernels {
namespace {

using testing::MakeStoredMatrix;
using testing::RandomFloats;
using testing::StoredMatrix;

// Checks y against a double-precision naive product. Float accumulation in any order is
// off by at most a few ulps of sum |x * w| per output, so that sum scales the tolerance.
void ExpectMatchesReference(const std::vector<float>& x, const std::vector<float>& w, int64_t m,
                            int64_t n, int64_t k, const std::vector<float>& y,
                            const std::string& what) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0.0;
      double magnitude = 0.0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double p = static_cast<double>(x[i * k + kk]) * w[j * k + kk];
        ref += p;
        magnitude += std::fabs(p);
      }
      ASSERT_NEAR(y[i * n + j], ref, 1e-5 * magnitude + 1e-6)
          << what << " m=" << m << " n=" << n << " k=" << k << " at (" << i << ", " << j << ")";
    }
  }
}

// What the kernel multiplies by: x itself, or its BF16 rounding on the path that rounds
// activations for BF16 weights (the products and sums must still be exact to float).
std::vector<float> ActivationsAsUsed(const std::vector<float>& x, DType dtype, SimdLevel level) {
  if (level != SimdLevel::kAvx512Bf16 || dtype != DType::kBF16) return x;
  std::vector<float> rounded(x.size());
  for (size_t i = 0; i < x.size(); ++i) rounded[i] = Bf16ToF32(F32ToBf16(x[i]));
  return rounded;
}

// One product of seeded random x [m, k] (seed) and W [n, k] (seed + 1, stored as `dtype`)
// on `level`, against the reference.
void ExpectGemmMatchesReference(DType dtype, SimdLevel level, ThreadPool* pool, int64_t m,
                                int64_t n, int64_t k, uint32_t seed) {
  const std::vector<float> x = RandomFloats(m * k, seed);
  const StoredMatrix w = MakeStoredMatrix(n * k, dtype, seed + 1);
  std::vector<float> y(m * n, std::nanf(""));
  GemmAtLevel(level, x.data(), m, MatrixView{w.bytes.data(), dtype, n, k}, y.data(), pool);
  ExpectMatchesReference(ActivationsAsUsed(x, dtype, level), w.values, m, n, k, y,
                         DTypeName(dtype));
}

class GemmTest : public ::testing::TestWithParam<std::tuple<DType, SimdLevel, int>> {};

TEST_P(GemmTest, MatchesNaiveProductOnAwkwardSizes) {
  const auto [dtype, level, threads] = GetParam();
  if (level > DetectSimdLevel()) GTEST_SKIP() << SimdLevelName(level) << " not on this CPU";
  ThreadPool pool(threads);
  uint32_t seed = 2;
  for (int64_t m : {1, 3, 17}) {
    for (int64_t k : {1, 7, 64, 100, 513}) {
      for (int64_t n : {1, 5, 33, 172}) {
        ExpectGemmMatchesReference(dtype, level, &pool, m, n, k, seed);
        seed += 2;
      }
    }
  }
}

// Prefill shapes that cross every blocking boundary: more than one row block of x, a K
// chunk boundary plus a tail shorter than a vector, and a column tail.
TEST_P(GemmTest, MatchesNaiveProductAcrossBlocks) {
  const auto [dtype, level, threads] = GetParam();
  if (level > DetectSimdLevel()) GTEST_SKIP() << SimdLevelName(level) << " not on this CPU";
  ThreadPool pool(threads);
  ExpectGemmMatchesReference(dtype, level, &pool, /*m=*/131, /*n=*/45, /*k=*/1100, /*seed=*/7);
}

// Decode and prefill shapes of a real layer: K chunks of the BF16 path (multiples of its
// 32-element step) and every micro-tile width, against the same reference.
TEST_P(GemmTest, MatchesNaiveProductAtLayerShapes) {
  const auto [dtype, level, threads] = GetParam();
  if (level > DetectSimdLevel()) GTEST_SKIP() << SimdLevelName(level) << " not on this CPU";
  ThreadPool pool(threads);
  for (int64_t m : {1, 4, 9, 70}) {
    ExpectGemmMatchesReference(dtype, level, &pool, m, /*n=*/103, /*k=*/2080,
                               /*seed=*/static_cast<uint32_t>(21 + m));
  }
}

// Each row of x gets the same bits whether it is multiplied alone or among others:
// speculative verification scores a sequence's last token and its proposals in one pass,
// and greedy output with speculation must equal decoding them one at a time, where
// near-ties in the logits (common with a 128k vocabulary) would otherwise flip the argmax.
// The row counts cover every micro-tile height and its remainders; K and N have tails.
// Only the BF16-weights path on AVX512-BF16 (BF16 checkpoints on Zen 4 and Sapphire
// Rapids) holds this so far: the other paths sum in another order once x has more rows.
TEST(GemmBf16Test, RowsGetTheSameBitsAloneAsInABatch) {
  if (DetectSimdLevel() < SimdLevel::kAvx512Bf16) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  const int64_t n = 203, k = 1057;
  const StoredMatrix w = MakeStoredMatrix(n * k, DType::kBF16, 41);
  const MatrixView view{w.bytes.data(), DType::kBF16, n, k};
  for (const int threads : {1, 3}) {
    ThreadPool pool(threads);
    for (int64_t m : {2, 3, 4, 5, 6, 9, 13}) {
      const std::vector<float> x = RandomFloats(m * k, static_cast<uint32_t>(50 + m));
      std::vector<float> batched(m * n);
      GemmAtLevel(SimdLevel::kAvx512Bf16, x.data(), m, view, batched.data(), &pool);
      for (int64_t i = 0; i < m; ++i) {
        std::vector<float> alone(n);
        GemmAtLevel(SimdLevel::kAvx512Bf16, x.data() + i * k, 1, view, alone.data(), &pool);
        for (int64_t j = 0; j < n; ++j) {
          ASSERT_EQ(std::bit_cast<uint32_t>(batched[i * n + j]), std::bit_cast<uint32_t>(alone[j]))
              << threads << " threads, m=" << m << ", row " << i << ", column " << j << ": "
              << batched[i * n + j] << " in the batch, " << alone[j] << " alone";
        }
      }
    }
  }
}

// Rounding the activations is the only loss of the BF16 path: against the float product
// it stays within BF16's relative step (2^-8) of sum |x * w|.
TEST(GemmBf16Test, RoundedActivationsStayCloseToTheFloatProduct) {
  if (DetectSimdLevel() < SimdLevel::kAvx512Bf16) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  const int64_t m = 6, n = 40, k = 777;
  const std::vector<float> x = RandomFloats(m * k, 31);
  const StoredMatrix w = MakeStoredMatrix(n * k, DType::kBF16, 32);
  std::vector<float> bf16(m * n), f32(m * n);
  const MatrixView view{w.bytes.data(), DType::kBF16, n, k};
  GemmAtLevel(SimdLevel::kAvx512Bf16, x.data(), m, view, bf16.data(), nullptr);
  GemmAtLevel(SimdLevel::kAvx512, x.data(), m, view, f32.data(), nullptr);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double magnitude = 0.0;
      for (int64_t kk = 0; kk < k; ++kk) magnitude += std::fabs(x[i * k + kk] * w.values[j * k + kk]);
      EXPECT_NEAR(bf16[i * n + j], f32[i * n + j], magnitude / 256.0) << i << ", " << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllPaths, GemmTest,
    ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                       ::testing::Values(SimdLevel::kScalar, SimdLevel::kAvx2,
                                         SimdLevel::kAvx512, SimdLevel::kAvx512Bf16),
                       ::testing::Values(1, 3)),
    [](const auto& info) {
      return std::string(DTypeName(std::get<0>(info.param))) + "_" +
             SimdLevelName(std::get<1>(info.param)) + "_" +
             std::to_string(std::get<2>(info.param)) + "threads";
    });

TEST(GemmDispatchTest, PicksTheWidestSupportedPath) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    EXPECT_GE(DetectSimdLevel(), SimdLevel::kAvx512);
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    EXPECT_EQ(DetectSimdLevel(), SimdLevel::kAvx2);
  } else {
    EXPECT_EQ(DetectSimdLevel(), SimdLevel::kScalar);
  }
#endif
  EXPECT_EQ(ActiveSimdLevel(), DetectSimdLevel());
}

TEST(GemmDispatchTest, ForcedScalarPathGivesTheSameResults) {
  const int64_t m = 5, n = 70, k = 300;
  const std::vector<float> x = RandomFloats(m * k, 11);
  const StoredMatrix w = MakeStoredMatrix(n * k, DType::kBF16, 12);
  const MatrixView view{w.bytes.data(), DType::kBF16, n, k};
  ThreadPool pool(2);

  std::vector<float> automatic(m * n), scalar(m * n);
  Gemm(x.data(), m, view, automatic.data(), &pool);
  ASSERT_EQ(SetSimdLevelOverride(SimdLevel::kScalar), SimdLevel::kScalar);
  EXPECT_EQ(ActiveSimdLevel(), SimdLevel::kScalar);
  Gemm(x.data(), m, view, scalar.data(), &pool);
  ClearSimdLevelOverride();
  EXPECT_EQ(ActiveSimdLevel(), DetectSimdLevel());

  ExpectMatchesReference(ActivationsAsUsed(x, DType::kBF16, DetectSimdLevel()), w.values, m, n,
                         k, automatic, "automatic");
  ExpectMatchesReference(x, w.values, m, n, k, scalar, "scalar");
}

TEST(GemmDispatchTest, OverrideIsClampedToTheCpu) {
  const SimdLevel got = SetSimdLevelOverride(SimdLevel::kAvx512Bf16);
  EXPECT_EQ(got, DetectSimdLevel());
  ClearSimdLevelOverride();
}

TEST(GemmTest, EmptyInnerDimensionGivesZeros) {
  std::vector<float> y(6, 1.0f);
  const float x = 0.0f;
  const float w = 0.0f;
  Gemm(&x, 2, MatrixView{&w, DType::kF32, 3, 0}, y.data(), nullptr);
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace tessera::kernels
