#include "kernels/cpu/gemm.h"

#include <cmath>
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

class GemmTest : public ::testing::TestWithParam<std::tuple<DType, SimdLevel, int>> {};

TEST_P(GemmTest, MatchesNaiveProductOnAwkwardSizes) {
  const auto [dtype, level, threads] = GetParam();
  if (level > DetectSimdLevel()) GTEST_SKIP() << SimdLevelName(level) << " not on this CPU";
  ThreadPool pool(threads);
  uint32_t seed = 1;
  for (int64_t m : {1, 3, 17}) {
    for (int64_t k : {1, 7, 64, 100, 513}) {
      for (int64_t n : {1, 5, 33, 172}) {
        const std::vector<float> x = RandomFloats(m * k, ++seed);
        const StoredMatrix w = MakeStoredMatrix(n * k, dtype, ++seed);
        std::vector<float> y(m * n, std::nanf(""));
        GemmAtLevel(level, x.data(), m, MatrixView{w.bytes.data(), dtype, n, k}, y.data(),
                    &pool);
        ExpectMatchesReference(x, w.values, m, n, k, y, DTypeName(dtype));
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
  const int64_t m = 131, n = 45, k = 1100;
  const std::vector<float> x = RandomFloats(m * k, 7);
  const StoredMatrix w = MakeStoredMatrix(n * k, dtype, 8);
  std::vector<float> y(m * n, std::nanf(""));
  GemmAtLevel(level, x.data(), m, MatrixView{w.bytes.data(), dtype, n, k}, y.data(), &pool);
  ExpectMatchesReference(x, w.values, m, n, k, y, DTypeName(dtype));
}

INSTANTIATE_TEST_SUITE_P(
    AllPaths, GemmTest,
    ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                       ::testing::Values(SimdLevel::kScalar, SimdLevel::kAvx2,
                                         SimdLevel::kAvx512),
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
    EXPECT_EQ(DetectSimdLevel(), SimdLevel::kAvx512);
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

  for (int64_t i = 0; i < m * n; ++i) {
    EXPECT_NEAR(automatic[i], scalar[i], 1e-5 * (std::fabs(scalar[i]) + 1.0)) << "index " << i;
  }
  ExpectMatchesReference(x, w.values, m, n, k, scalar, "scalar");
}

TEST(GemmDispatchTest, OverrideIsClampedToTheCpu) {
  const SimdLevel got = SetSimdLevelOverride(SimdLevel::kAvx512);
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
