#include "kernels/cpu/gemm_quantized.h"

#include <cmath>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/thread_pool.h"

namespace tessera::kernels {
namespace {

float Value(DType dtype, uint8_t b) {
  return dtype == DType::kI8 ? static_cast<float>(static_cast<int8_t>(b)) : Fp8E4M3ToF32(b);
}

// Random bytes (every code, NaN codes of FP8 excluded) and scales against a float64
// product over the dequantized weights, on every SIMD level this CPU has.
void ExpectMatchesReference(DType dtype, ThreadPool* pool, int64_t m, int64_t n, int64_t k) {
  std::mt19937 rng(static_cast<uint32_t>(m * 1000003 + n * 1009 + k));
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<float> x(m * k);
  for (float& v : x) v = uni(rng);
  std::vector<uint8_t> q(n * k);
  for (uint8_t& b : q) {
    do {
      b = static_cast<uint8_t>(rng());
    } while (dtype == DType::kF8E4M3 && (b & 0x7f) == 0x7f);
  }
  std::vector<float> scales(n);
  for (float& s : scales) s = std::ldexp(1.0f + uni(rng) * 0.5f, -8);
  const MatrixView w{q.data(), dtype, n, k, scales.data()};
  for (int level = 0; level <= static_cast<int>(DetectSimdLevel()); ++level) {
    std::vector<float> y(m * n, std::nanf(""));
    GemmAtLevel(static_cast<SimdLevel>(level), x.data(), m, w, y.data(), pool);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double ref = 0.0, magnitude = 0.0;
        for (int64_t c = 0; c < k; ++c) {
          const double p = static_cast<double>(x[i * k + c]) * scales[j] * Value(dtype, q[j * k + c]);
          ref += p;
          magnitude += std::fabs(p);
        }
        ASSERT_NEAR(y[i * n + j], ref, 1e-5 * magnitude + 1e-6)
            << DTypeName(dtype) << " level=" << level << " m=" << m << " n=" << n
            << " k=" << k << " at (" << i << ", " << j << ")";
      }
    }
  }
}

TEST(GemmQuantizedTest, MatchesReferenceAtAwkwardSizes) {
  ThreadPool pool(2);
  for (DType dtype : {DType::kI8, DType::kF8E4M3}) {
    for (int64_t m : {1, 2, 3, 5, 17, 64}) {
      for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {7, 33}, {37, 129}, {70, 67}, {5, 48}, {9, 24}, {3, 16}}) {
        ExpectMatchesReference(dtype, &pool, m, n, k);
        ExpectMatchesReference(dtype, nullptr, m, n, k);
      }
    }
  }
}

}  // namespace
}  // namespace tessera::kernels
