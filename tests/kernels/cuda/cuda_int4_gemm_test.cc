// Group-wise 4-bit (kU4, GPTQ/AWQ) GEMM of the CUDA backend against the CPU backend's
// GemmInt4: the fused decode GEMV (m <= 8; 128-bit loads when the group is a multiple of 32,
// the scalar path otherwise) and the prefill path (BF16 widening, then cuBLASLt).
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "kernels/cuda/launchers.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace tessera::kernels::cuda_testing {
namespace {

struct Int4Case {
  int64_t n = 0;
  int64_t k = 0;
  int group_size = 0;  // 0: one group per row, as GPTQ's group_size -1 loads.
  bool fractional_zeros = false;
  size_t offset = 0;   // Bytes before the codes: an unaligned weight pointer.
};

class CudaInt4GemmTest : public CudaVsCpuTest {
 protected:
  void Check(int64_t m, const Int4Case& c) {
    SCOPED_TRACE("m=" + std::to_string(m) + " n=" + std::to_string(c.n) +
                 " k=" + std::to_string(c.k) + " group=" + std::to_string(c.group_size) +
                 (c.fractional_zeros ? " fractional zeros" : "") +
                 " offset=" + std::to_string(c.offset));
    const int group = c.group_size > 0 ? c.group_size : static_cast<int>(c.k);
    const int64_t groups = c.k / group;
    std::mt19937 rng(static_cast<uint32_t>(m * 7919 + c.n * 31 + c.k + group));
    std::vector<uint8_t> packed(c.n * c.k / 2);
    for (uint8_t& b : packed) b = static_cast<uint8_t>(rng());
    std::vector<float> scales(c.n * groups), zeros(c.n * groups);
    std::uniform_real_distribution<float> scale_dist(0.002f, 0.02f);
    for (size_t i = 0; i < scales.size(); ++i) {
      scales[i] = scale_dist(rng);
      // GPTQ v1 stores zero + 1 (1..16), AWQ and v2 0..15: integers either way.
      zeros[i] = static_cast<float>(rng() % 17) + (c.fractional_zeros ? 0.37f : 0.0f);
    }
    const std::vector<float> x = RandomFloats(m * c.k, 29);
    std::vector<float> expected(m * c.n);
    if (m > gpu::kQuantizedGemvMaxRows) {
      // The prefill path widens s * (q - z) to BF16 (see WidenedBf16Gemm).
      std::vector<float> dequantized(c.n * c.k);
      for (int64_t r = 0; r < c.n; ++r) {
        for (int64_t col = 0; col < c.k; ++col) {
          const uint8_t b = packed[(r * c.k + col) / 2];
          const float q = static_cast<float>(col % 2 == 0 ? b & 0xf : b >> 4);
          const int64_t g = r * groups + col / group;
          dequantized[r * c.k + col] = scales[g] * (q - zeros[g]);
        }
      }
      expected = WidenedBf16Gemm(*cpu_, x, m, dequantized, c.n, c.k);
    } else {
      MatrixView host{packed.data(), DType::kU4, c.n, c.k, scales.data(), c.group_size,
                      zeros.data()};
      cpu_->Gemm(x.data(), m, host, expected.data());
    }

    std::vector<uint8_t> padded(c.offset, 0);
    padded.insert(padded.end(), packed.begin(), packed.end());
    DeviceArray<uint8_t> d_packed(padded);
    DeviceArray<float> d_scales(scales), d_zeros(zeros), d_x(x), d_y(m * c.n);
    MatrixView device{d_packed.get() + c.offset, DType::kU4, c.n, c.k, d_scales.get(),
                      c.group_size, d_zeros.get()};
    cuda_->Gemm(d_x.get(), m, device, d_y.get());
    cuda_->Synchronize();
    ASSERT_TRUE(cuda_->status().ok()) << cuda_->status();
    ExpectAllClose(d_y.ToHost(), expected, kQuantizedGemmTolerance, "int4 gemm");
  }
};

TEST_F(CudaInt4GemmTest, VectorPathGroupsOf128AndWholeRows) {
  for (int64_t m : {1, 2, 3, 4, 5, 8, 17, 64}) {
    Check(m, {.n = 37, .k = 256, .group_size = 128});   // A partial block of rows.
    Check(m, {.n = 130, .k = 1024, .group_size = 128});
    Check(m, {.n = 67, .k = 1024, .group_size = 0});    // One group per row.
    Check(m, {.n = 19, .k = 96, .group_size = 32});     // Fewer chunks than lanes.
    Check(m, {.n = 50, .k = 2048, .group_size = 128});  // Two warps per row group.
  }
}

TEST_F(CudaInt4GemmTest, ScalarPathOddGroupsWidthsAndAlignment) {
  for (int64_t m : {1, 3, 8, 33}) {
    Check(m, {.n = 33, .k = 200, .group_size = 40});  // Group not a multiple of 32.
    Check(m, {.n = 20, .k = 1000, .group_size = 0});  // Whole row of 1000 (1000 % 32 = 8).
    Check(m, {.n = 21, .k = 2056, .group_size = 0});  // Scalar, four warps per row group.
    Check(m, {.n = 45, .k = 512, .group_size = 128, .offset = 2});  // Unaligned codes.
  }
}

TEST_F(CudaInt4GemmTest, FractionalZerosAndDecodeShapes) {
  for (int64_t m : {1, 3, 8}) {
    Check(m, {.n = 70, .k = 512, .group_size = 64, .fractional_zeros = true});
    Check(m, {.n = 259, .k = 4096, .group_size = 128});  // Four warps per row group.
    Check(m, {.n = 96, .k = 4096, .group_size = 0});
  }
  Check(200, {.n = 259, .k = 4096, .group_size = 128});
}

TEST(Int4LauncherTest, ChecksGroupsAndTablesWithoutTouchingTheDevice) {
  std::string error;
  uint8_t codes[8] = {};
  float table[4] = {};
  EXPECT_TRUE(gpu::CheckQuantizedWeights(
      MatrixView{codes, DType::kU4, 1, 16, table, 8, table}, "t", &error)) << error;
  EXPECT_TRUE(gpu::CheckQuantizedWeights(
      MatrixView{codes, DType::kU4, 1, 16, table, 0, table}, "t", &error)) << error;
  EXPECT_FALSE(gpu::CheckQuantizedWeights(
      MatrixView{codes, DType::kU4, 1, 16, table, 8, nullptr}, "t", &error));
  EXPECT_NE(error.find("without scales and zeros"), std::string::npos) << error;
  EXPECT_FALSE(gpu::CheckQuantizedWeights(
      MatrixView{codes, DType::kU4, 1, 16, table, 3, table}, "t", &error));
  EXPECT_NE(error.find("must be even and divide"), std::string::npos) << error;
  EXPECT_FALSE(gpu::CheckQuantizedWeights(
      MatrixView{codes, DType::kU4, 1, 16, table, 6, table}, "t", &error));
  EXPECT_EQ(gpu::QuantizedGroupSize(MatrixView{codes, DType::kU4, 1, 16, table, 0, table}), 16);
}

}  // namespace
}  // namespace tessera::kernels::cuda_testing
