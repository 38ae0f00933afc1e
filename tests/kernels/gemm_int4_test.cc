#include "kernels/cpu/gemm_int4.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/thread_pool.h"

namespace tessera::kernels {
namespace {

// A random kU4 matrix with its codes, scales and zeros kept apart for the reference.
struct Int4Case {
  int64_t n = 0, k = 0;
  int group = 0;
  std::vector<uint8_t> packed;  // [n, k / 2]
  std::vector<int> codes;       // [n, k]
  std::vector<float> scales, zeros;  // [n, k / group]

  MatrixView View() const {
    MatrixView v{packed.data(), DType::kU4, n, k, scales.data(), group, zeros.data()};
    return v;
  }
};

Int4Case MakeCase(int64_t n, int64_t k, int group, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> code(0, 15);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  Int4Case c;
  c.n = n;
  c.k = k;
  c.group = group;
  c.packed.assign(n * k / 2, 0);
  c.codes.resize(n * k);
  for (int64_t i = 0; i < n * k; ++i) {
    c.codes[i] = code(rng);
    c.packed[i / 2] |= static_cast<uint8_t>(c.codes[i] << (4 * (i & 1)));
  }
  const int64_t groups = n * (k / group);
  for (int64_t g = 0; g < groups; ++g) {
    c.scales.push_back(scale(rng));
    c.zeros.push_back(static_cast<float>(code(rng)));  // Zeros are integers in every format.
  }
  return c;
}

std::vector<float> RandomX(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  return x;
}

// Against a float64 product of the dequantized weights; float accumulation in any order
// stays within a few ulps of sum |x * w|.
void ExpectMatches(SimdLevel level, ThreadPool* pool, int64_t m, int64_t n, int64_t k, int group) {
  const Int4Case c = MakeCase(n, k, group, static_cast<uint32_t>(n * 131 + k + group));
  const std::vector<float> x = RandomX(m * k, static_cast<uint32_t>(m + 7));
  std::vector<float> y(m * n, std::nanf(""));
  GemmAtLevel(level, x.data(), m, c.View(), y.data(), pool);
  const int64_t groups = k / group;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0, magnitude = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const int64_t g = j * groups + kk / group;
        const double w = static_cast<double>(c.scales[g]) * (c.codes[j * k + kk] - c.zeros[g]);
        ref += x[i * k + kk] * w;
        magnitude += std::fabs(x[i * k + kk] * w);
      }
      ASSERT_NEAR(y[i * n + j], ref, 2e-6 * magnitude + 1e-7)
          << SimdLevelName(level) << " m=" << m << " n=" << n << " k=" << k << " group=" << group
          << " at (" << i << ", " << j << ")";
    }
  }
}

std::vector<SimdLevel> Levels() {
  std::vector<SimdLevel> levels;
  for (SimdLevel l : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (l <= DetectSimdLevel()) levels.push_back(l);
  }
  return levels;
}

TEST(GemmInt4Test, MatchesFloat64ReferenceAtAwkwardSizes) {
  ThreadPool pool(3);
  struct Shape { int64_t n, k; int group; };
  // Groups of 32/64/128 take the vector unpacking; 8 and 24 the scalar fallback; a group
  // as wide as k is GPTQ's per-channel (-1) layout. n = 37 and 19 leave partial panels.
  const Shape shapes[] = {{37, 64, 32}, {19, 256, 128}, {5, 96, 96},  {16, 192, 64},
                          {9, 40, 8},   {7, 72, 24},    {33, 48, 16}, {3, 130, 130}};
  for (SimdLevel level : Levels()) {
    for (const Shape& s : shapes) {
      for (int64_t m : {1, 2, 3, 17}) {
        ExpectMatches(level, nullptr, m, s.n, s.k, s.group);
        ExpectMatches(level, &pool, m, s.n, s.k, s.group);
      }
    }
  }
}

TEST(GemmInt4Test, LargeEnoughToRunOnThePool) {
  ThreadPool pool(4);
  for (SimdLevel level : Levels()) ExpectMatches(level, &pool, 5, 300, 512, 128);
}

TEST(GemmInt4Test, DispatchedFromGemm) {
  // kernels::Gemm routes kU4 views here: same numbers as the explicit call.
  const Int4Case c = MakeCase(21, 64, 32, 3);
  const std::vector<float> x = RandomX(2 * 64, 4);
  std::vector<float> a(2 * 21), b(2 * 21);
  Gemm(x.data(), 2, c.View(), a.data(), nullptr);
  GemmInt4(ActiveSimdLevel(), x.data(), 2, c.View(), b.data(), nullptr);
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace tessera::kernels
