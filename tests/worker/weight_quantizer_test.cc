#include "worker/weight_quantizer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(WeightQuantizerTest, Int8ScalesRoundsAndKeepsZeroRows) {
  // Row 0: absmax 2.54 -> scale 0.02; row 1 all zero -> scale 1.
  const std::vector<float> w = {2.54f, -2.54f, 0.01f, 0.03f, 0.0f, 0.0f, 0.0f, 0.0f};
  std::vector<uint8_t> q(8);
  std::vector<float> scales(2);
  QuantizeRows(WeightQuantization::kInt8, w.data(), 2, 4, q.data(), scales.data());
  EXPECT_FLOAT_EQ(scales[0], 2.54f / 127.0f);
  EXPECT_EQ(scales[1], 1.0f);
  EXPECT_EQ(static_cast<int8_t>(q[0]), 127);
  EXPECT_EQ(static_cast<int8_t>(q[1]), -127);  // Symmetric: -128 is never used.
  EXPECT_EQ(static_cast<int8_t>(q[2]), 0);     // 0.5 rounds to even.
  EXPECT_EQ(static_cast<int8_t>(q[3]), 2);     // 1.5 rounds to even.
  for (int c = 4; c < 8; ++c) EXPECT_EQ(q[c], 0);
}

TEST(WeightQuantizerTest, Fp8UsesTheWholeRangeAndStaysWithinHalfAStep) {
  std::vector<float> w(64);
  for (int i = 0; i < 64; ++i) w[i] = std::sin(0.37f * i) * 3.0f;
  std::vector<uint8_t> q(64);
  float scale = 0.0f;
  QuantizeRows(WeightQuantization::kFp8, w.data(), 1, 64, q.data(), &scale);
  float absmax = 0.0f;
  for (float v : w) absmax = std::max(absmax, std::fabs(v));
  EXPECT_FLOAT_EQ(scale, absmax / 448.0f);
  for (int i = 0; i < 64; ++i) {
    const float back = scale * QuantizedValue(DType::kF8E4M3, q[i]);
    // E4M3 has 3 mantissa bits: relative error <= 2^-4 for normals, plus the subnormal step.
    EXPECT_NEAR(back, w[i], std::fabs(w[i]) / 16.0f + scale * std::ldexp(1.0f, -10)) << i;
    EXPECT_EQ(q[i], F32ToFp8E4M3(w[i] / scale));
  }
}

TEST(WeightQuantizerTest, Int8ClampsAndDequantizesExactlyOnTheGrid) {
  const std::vector<float> w = {-1.0f, 0.5f, 1.0f};
  std::vector<uint8_t> q(3);
  float scale = 0.0f;
  QuantizeRows(WeightQuantization::kInt8, w.data(), 1, 3, q.data(), &scale);
  EXPECT_EQ(QuantizedValue(DType::kI8, q[0]), -127.0f);
  EXPECT_EQ(QuantizedValue(DType::kI8, q[2]), 127.0f);
  EXPECT_EQ(QuantizedDType(WeightQuantization::kInt8), DType::kI8);
  EXPECT_EQ(QuantizedDType(WeightQuantization::kFp8), DType::kF8E4M3);
}

}  // namespace
}  // namespace tessera
