#include "kernels/cpu/gemm_int8.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_int8_internal.h"
#include "kernels/cpu/int8_blocked.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/thread_pool.h"

namespace tessera::kernels {
namespace {

// Random int8 codes in [-127, 127] and BF16 group scales, packed.
struct Weights {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<int8_t> q;
  std::vector<float> scales;  // [rows, groups]
  std::vector<uint8_t> packed;
  MatrixView view() const {
    MatrixView v{packed.data(), DType::kI8, rows, cols};
    v.group_size = kInt8GroupSize;
    v.layout = WeightLayout::kInt8Blocked16;
    return v;
  }
  float at(int64_t r, int64_t c) const {
    return scales[r * Int8BlockedShape{rows, cols}.groups() + c / kInt8GroupSize] *
           static_cast<float>(q[r * cols + c]);
  }
};

Weights RandomWeights(int64_t rows, int64_t cols, std::mt19937* rng) {
  Weights w;
  w.rows = rows;
  w.cols = cols;
  std::uniform_int_distribution<int> code(-127, 127);
  std::uniform_real_distribution<float> uni(0.5f, 2.0f);
  w.q.resize(rows * cols);
  for (int8_t& v : w.q) v = static_cast<int8_t>(code(*rng));
  w.scales.resize(rows * Int8BlockedShape{rows, cols}.groups());
  for (float& s : w.scales) s = F16ToF32(F32ToF16(std::ldexp(uni(*rng), -9)));
  w.packed.resize(Int8BlockedShape{rows, cols}.bytes());
  PackInt8Blocked(w.q.data(), w.scales.data(), rows, cols, w.packed.data());
  return w;
}

TEST(Int8BlockedTest, PackKeepsEveryWeightAndScale) {
  std::mt19937 rng(7);
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {16, 32}, {17, 33}, {5, 172}, {40, 64}}) {
    const Weights w = RandomWeights(rows, cols, &rng);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        ASSERT_EQ(Int8BlockedWeight(w.view(), r, c), w.at(r, c)) << r << "," << c;
      }
    }
  }
  // 1.0625 bytes per weight plus alignment, as llama.cpp's Q8_0.
  EXPECT_EQ(Int8BlockedShape({2048, 2048}).bytes(), 2048u * 2048u * 17u / 16u);
}

// Every SIMD level gives the scalar path's floats exactly, and all of them stay within the
// int16 rounding of the activations (half a step of max|x| / 32767 per group) of a
// float64 product with the dequantized weights `at(r, c)`.
template <typename GemmFn, typename At>
void ExpectLevelsMatch(GemmFn gemm, const MatrixView& w, const At& at, ThreadPool* pool,
                       int64_t m, std::mt19937* rng) {
  const int64_t n = w.rows, k = w.cols;
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<float> x(m * k);
  for (float& v : x) v = uni(*rng);
  if (k > 40) x[3] = 1000.0f;  // An outlier costs only its own group precision.
  std::vector<float> expected(m * n, std::nanf(""));
  gemm(SimdLevel::kScalar, x.data(), m, w, expected.data(), pool);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0.0, bound = 0.0;
      for (int64_t c = 0; c < k; ++c) {
        const int64_t g0 = c / kInt8GroupSize * kInt8GroupSize;
        float amax = 0.0f;
        for (int64_t t = g0; t < std::min(k, g0 + kInt8GroupSize); ++t) {
          amax = std::max(amax, std::fabs(x[i * k + t]));
        }
        const double wv = at(j, c);
        ref += static_cast<double>(x[i * k + c]) * wv;
        bound += std::fabs(wv) * (0.5 * amax / 32767.0 + 1e-6 * std::fabs(x[i * k + c]));
      }
      ASSERT_NEAR(expected[i * n + j], ref, 1.01 * bound + 1e-5)
          << "m=" << m << " n=" << n << " k=" << k << " at (" << i << ", " << j << ")";
    }
  }
  for (int level = 1; level <= static_cast<int>(DetectSimdLevel()); ++level) {
    std::vector<float> y(m * n, std::nanf(""));
    GemmAtLevel(static_cast<SimdLevel>(level), x.data(), m, w, y.data(), pool);
    ASSERT_EQ(0, std::memcmp(y.data(), expected.data(), y.size() * sizeof(float)))
        << SimdLevelName(static_cast<SimdLevel>(level)) << " m=" << m << " n=" << n
        << " k=" << k;
  }
}

void ExpectMatches(ThreadPool* pool, int64_t m, int64_t n, int64_t k, std::mt19937* rng) {
  const Weights w = RandomWeights(n, k, rng);
  ExpectLevelsMatch(GemmInt8Blocked, w.view(),
                    [&](int64_t r, int64_t c) { return w.at(r, c); }, pool, m, rng);
}

TEST(GemmInt8BlockedTest, EveryLevelMatchesTheScalarPathAtAwkwardSizes) {
  ThreadPool pool(2);
  std::mt19937 rng(11);
  for (int64_t m : {1, 2, 3, 4, 5, 8, 9, 17}) {
    for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{
             {1, 1}, {7, 33}, {37, 129}, {16, 32}, {17, 64}, {5, 172}, {70, 67}}) {
      ExpectMatches(&pool, m, n, k, &rng);
      ExpectMatches(nullptr, m, n, k, &rng);
    }
  }
  ExpectMatches(&pool, 3, 256, 2048, &rng);  // Parallel over row blocks.
}

// The dispatcher picks one AVX-512 kernel per CPU; run both the BW (`plain`) and the VNNI
// (`vnni`, where the CPU has it) kernels against the scalar one on `w`.
void ExpectAvx512KernelsMatch(const MatrixView& w, int64_t row_blocks, int64_t m,
                              gemm_int8_internal::BlocksFn scalar,
                              gemm_int8_internal::BlocksFn plain,
                              gemm_int8_internal::BlocksFn vnni, std::mt19937* rng) {
  const int64_t n = w.rows, k = w.cols;
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<float> x(m * k);
  for (float& v : x) v = uni(*rng);
  std::vector<int32_t> pairs, sums;
  std::vector<float> scales;
  gemm_int8_internal::Int8Activations acts;
  gemm_int8_internal::QuantizeActivations(x.data(), m, k, &pairs, &scales, &sums, &acts);
  std::vector<float> expected(m * n), y(m * n);
  scalar(acts, m, w, expected.data(), 0, row_blocks);
  std::vector<gemm_int8_internal::BlocksFn> kernels = {plain};
  if (gemm_int8_internal::CpuHasAvx512Vnni()) kernels.push_back(vnni);
  for (size_t i = 0; i < kernels.size(); ++i) {
    std::fill(y.begin(), y.end(), std::nanf(""));
    kernels[i](acts, m, w, y.data(), 0, row_blocks);
    ASSERT_EQ(0, std::memcmp(y.data(), expected.data(), y.size() * sizeof(float)))
        << "kernel " << i << " m=" << m << " n=" << n << " k=" << k;
  }
}

TEST(GemmInt8BlockedTest, BothAvx512KernelsMatchTheScalarPath) {
  if (!gemm_int8_internal::CpuHasAvx512Bw()) GTEST_SKIP() << "no AVX512-BW on this CPU";
  std::mt19937 rng(5);
  for (auto [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 33, 172}, {2, 16, 64}, {3, 40, 96}, {8, 17, 2048}, {13, 50, 77}}) {
    const Weights w = RandomWeights(n, k, &rng);
    ExpectAvx512KernelsMatch(w.view(), Int8BlockedShape{n, k}.row_blocks(), m,
                             gemm_int8_internal::BlocksScalar, gemm_int8_internal::BlocksAvx512,
                             gemm_int8_internal::BlocksAvx512Vnni, &rng);
  }
}

TEST(GemmInt8BlockedTest, ZeroActivationsGiveZeros) {
  std::mt19937 rng(3);
  const Weights w = RandomWeights(20, 70, &rng);
  std::vector<float> x(2 * 70, 0.0f);
  for (int level = 0; level <= static_cast<int>(DetectSimdLevel()); ++level) {
    std::vector<float> y(2 * 20, std::nanf(""));
    GemmAtLevel(static_cast<SimdLevel>(level), x.data(), 2, w.view(), y.data(), nullptr);
    for (float v : y) ASSERT_EQ(v, 0.0f);
  }
}

// Random 4-bit codes with float scales and fractional zeros per group, packed blocked.
struct Int4Weights {
  int64_t rows = 0;
  int64_t cols = 0;
  int group = 0;
  std::vector<uint8_t> codes;  // Row-major, low nibble first.
  std::vector<float> scales, zeros;
  std::vector<uint8_t> packed;
  MatrixView view() const {
    MatrixView v{packed.data(), DType::kU4, rows, cols};
    v.group_size = group;
    v.layout = WeightLayout::kU4Blocked16;
    return v;
  }
  float at(int64_t r, int64_t c) const {
    const int64_t groups = group > 0 && group < cols ? cols / group : 1;
    const int64_t g = groups == 1 ? 0 : c / group;
    const int q = (codes[r * (cols / 2) + c / 2] >> (4 * (c % 2))) & 0xf;
    return scales[r * groups + g] * (static_cast<float>(q) - zeros[r * groups + g]);
  }
};

Int4Weights RandomInt4(int64_t rows, int64_t cols, int group, std::mt19937* rng) {
  Int4Weights w;
  w.rows = rows;
  w.cols = cols;
  w.group = group;
  w.codes.resize(rows * cols / 2);
  for (uint8_t& b : w.codes) b = static_cast<uint8_t>((*rng)());
  const int64_t groups = group > 0 && group < cols ? cols / group : 1;
  std::uniform_real_distribution<float> uni(0.5f, 2.0f);
  w.scales.resize(rows * groups);
  w.zeros.resize(rows * groups);
  for (float& s : w.scales) s = std::ldexp(uni(*rng), -6);
  for (float& z : w.zeros) z = 8.0f + uni(*rng) - 1.25f;  // Fractional, as GPTQ v1 gives.
  w.packed.resize(Int4BlockedShape{rows, cols, group}.bytes());
  PackInt4Blocked(w.codes.data(), w.scales.data(), w.zeros.data(), rows, cols, group,
                  w.packed.data());
  return w;
}

void ExpectInt4Matches(ThreadPool* pool, int64_t m, int64_t n, int64_t k, int group,
                       std::mt19937* rng) {
  const Int4Weights w = RandomInt4(n, k, group, rng);
  for (int64_t r = 0; r < n; r += 7) {
    for (int64_t c = 0; c < k; c += 5) ASSERT_EQ(Int4BlockedWeight(w.view(), r, c), w.at(r, c));
  }
  ExpectLevelsMatch(GemmInt4Blocked, w.view(),
                    [&](int64_t r, int64_t c) { return w.at(r, c); }, pool, m, rng);
}

TEST(GemmInt4BlockedTest, EveryLevelMatchesTheScalarPath) {
  ThreadPool pool(2);
  std::mt19937 rng(13);
  for (int64_t m : {1, 2, 3, 5, 9}) {
    ExpectInt4Matches(&pool, m, 37, 256, 128, &rng);  // GPTQ's group 128.
    ExpectInt4Matches(&pool, m, 16, 64, 32, &rng);
    ExpectInt4Matches(nullptr, m, 70, 96, 96, &rng);  // Whole rows (group = cols).
    ExpectInt4Matches(nullptr, m, 5, 44, 0, &rng);    // Whole rows, K not a multiple of 32.
  }
  ExpectInt4Matches(&pool, 1, 512, 2048, 128, &rng);  // Parallel decode, four blocks a tile.
}

TEST(GemmInt4BlockedTest, BothAvx512KernelsMatchTheScalarPath) {
  if (!gemm_int8_internal::CpuHasAvx512Bw()) GTEST_SKIP() << "no AVX512-BW on this CPU";
  std::mt19937 rng(17);
  for (auto [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 70, 256}, {3, 33, 128}, {8, 17, 512}}) {
    const Int4Weights w = RandomInt4(n, k, 128, &rng);
    ExpectAvx512KernelsMatch(w.view(), Int4BlockedShape{n, k, 128}.row_blocks(), m,
                             gemm_int8_internal::BlocksInt4Scalar,
                             gemm_int8_internal::BlocksInt4Avx512,
                             gemm_int8_internal::BlocksInt4Avx512Vnni, &rng);
  }
}

}  // namespace
}  // namespace tessera::kernels
