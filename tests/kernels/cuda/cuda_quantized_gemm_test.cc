// Weight-only int8 / FP8 E4M3 GEMM of the CUDA backend (dequantize to BF16, BF16 GEMV or
// cuBLASLt, per-row scale) against the CPU backend, plus the byte decoding the kernels
// share with the host checked against common/dtype.h on every code (runs without a device).
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/quantized_value.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace tessera::kernels::cuda_testing {
namespace {

TEST(QuantizedValueTest, MatchesHostDecodingOnEveryByte) {
  for (int b = 0; b < 256; ++b) {
    const auto byte = static_cast<uint8_t>(b);
    EXPECT_EQ(quantized::Int8Value(byte), static_cast<float>(static_cast<int8_t>(byte)));
    const float expected = Fp8E4M3ToF32(byte);
    const float actual = quantized::Fp8E4M3Value(byte);
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(actual)) << "byte " << b;
    } else {
      EXPECT_EQ(actual, expected) << "byte " << b;
      EXPECT_EQ(std::signbit(actual), std::signbit(expected)) << "byte " << b;
    }
  }
}

class CudaQuantizedGemmTest : public CudaVsCpuTest {
 protected:
  void Check(DType dtype, int64_t m, int64_t n, int64_t k) {
    SCOPED_TRACE(std::string(DTypeName(dtype)) + " m=" + std::to_string(m) +
                 " n=" + std::to_string(n) + " k=" + std::to_string(k));
    std::mt19937 rng(static_cast<uint32_t>(m * 7919 + n * 31 + k));
    std::vector<uint8_t> q(n * k);
    for (uint8_t& b : q) {
      do {
        b = static_cast<uint8_t>(rng());
      } while (dtype == DType::kF8E4M3 && (b & 0x7f) == 0x7f);  // No NaN codes.
    }
    std::vector<float> scales(n);
    for (int64_t r = 0; r < n; ++r) scales[r] = std::ldexp(1.0f + (r % 7) * 0.1f, -9);
    const std::vector<float> x = RandomFloats(m * k, 23);
    std::vector<float> expected(m * n);
    cpu_->Gemm(x.data(), m, MatrixView{q.data(), dtype, n, k, scales.data()}, expected.data());
    DeviceArray<uint8_t> d_q(q);
    DeviceArray<float> d_scales(scales), d_x(x), d_y(m * n);
    cuda_->Gemm(d_x.get(), m, MatrixView{d_q.get(), dtype, n, k, d_scales.get()}, d_y.get());
    cuda_->Synchronize();
    ASSERT_TRUE(cuda_->status().ok()) << cuda_->status();
    // The weights are exact in BF16; cuBLASLt rounds the activations to BF16 (m > 8).
    ExpectAllClose(d_y.ToHost(), expected, m > gpu::kGemvMaxRows ? 1e-2 : 1e-4, "gemm");
  }
};

TEST_F(CudaQuantizedGemmTest, GemvAndCublasPathsAtAwkwardSizes) {
  for (DType dtype : {DType::kI8, DType::kF8E4M3}) {
    for (int64_t m : {1, 2, 3, 5, 17, 64}) {
      Check(dtype, m, 37, 100);
      Check(dtype, m, 130, 1024);
    }
  }
}

}  // namespace
}  // namespace tessera::kernels::cuda_testing
