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
  // Row 0: absmax 127 / 64 -> scale 1/64 (a BF16 value); row 1 all zero -> scale 1.
  const float s = 1.0f / 64.0f;
  const std::vector<float> w = {127 * s, -127 * s, 0.5f * s, 1.5f * s, 0.0f, 0.0f, 0.0f, 0.0f};
  std::vector<uint8_t> q(8);
  std::vector<float> scales(2);
  ASSERT_EQ(QuantizedScalesPerRow(WeightQuantization::kInt8, 4), 1);
  QuantizeRows(WeightQuantization::kInt8, w.data(), 2, 4, q.data(), scales.data());
  EXPECT_EQ(scales[0], s);
  EXPECT_EQ(scales[1], 1.0f);
  EXPECT_EQ(static_cast<int8_t>(q[0]), 127);
  EXPECT_EQ(static_cast<int8_t>(q[1]), -127);  // Symmetric: -128 is never used.
  EXPECT_EQ(static_cast<int8_t>(q[2]), 0);     // 0.5 rounds to even.
  EXPECT_EQ(static_cast<int8_t>(q[3]), 2);     // 1.5 rounds to even.
  for (int c = 4; c < 8; ++c) EXPECT_EQ(q[c], 0);
}

TEST(WeightQuantizerTest, Int8ScalesEachGroupOf32ColumnsWithTheNearestFp16Scale) {
  // 70 columns: groups [0, 32), [32, 64), [64, 70) with their own maxima.
  std::vector<float> w(70);
  for (int c = 0; c < 70; ++c) w[c] = std::sin(0.3f * c) * (c < 32 ? 1.0f : c < 64 ? 0.01f : 5.0f);
  std::vector<uint8_t> q(70);
  ASSERT_EQ(QuantizedScalesPerRow(WeightQuantization::kInt8, 70), 3);
  std::vector<float> scales(3);
  QuantizeRows(WeightQuantization::kInt8, w.data(), 1, 70, q.data(), scales.data());
  for (int g = 0; g < 3; ++g) {
    float absmax = 0.0f;
    for (int c = 32 * g; c < std::min(70, 32 * g + 32); ++c) absmax = std::max(absmax, std::fabs(w[c]));
    EXPECT_NEAR(scales[g], absmax / 127.0f, absmax / 127.0f / 2048.0f) << g;
    EXPECT_EQ(F16ToF32(F32ToF16(scales[g])), scales[g]) << g;  // Stored exactly as FP16.
    for (int c = 32 * g; c < std::min(70, 32 * g + 32); ++c) {
      EXPECT_NEAR(scales[g] * QuantizedValue(DType::kI8, q[c]), w[c], 0.5f * scales[g]) << c;
    }
  }
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

TEST(WeightQuantizerTest, Int8ScaleRoundedDownStillMapsTheMaximumTo127) {
  // 1/127 is no FP16 value: the nearest is 0.0078735 (1/127.008), so the maximum lands
  // just past 127 and is clamped there; +-w stay symmetric.
  const std::vector<float> w = {-1.0f, 0.5f, 1.0f};
  std::vector<uint8_t> q(3);
  float scale = 0.0f;
  QuantizeRows(WeightQuantization::kInt8, w.data(), 1, 3, q.data(), &scale);
  EXPECT_EQ(scale, F16ToF32(F32ToF16(1.0f / 127.0f)));
  EXPECT_LT(scale, 1.0f / 127.0f);
  EXPECT_EQ(QuantizedValue(DType::kI8, q[0]), -127.0f);
  EXPECT_EQ(QuantizedValue(DType::kI8, q[2]), 127.0f);
  EXPECT_EQ(QuantizedDType(WeightQuantization::kInt8), DType::kI8);
  EXPECT_EQ(QuantizedDType(WeightQuantization::kFp8), DType::kF8E4M3);
}

TEST(WeightQuantizerTest, Int8ScaleBelowFp16RangeIsNeverZero) {
  // absmax / 127 underflows FP16: the smallest FP16 step stands in, so dequantization
  // neither divides by zero nor blows up, and the tiny weights round to 0.
  const std::vector<float> w = {1e-9f, -2e-9f};
  std::vector<uint8_t> q(2);
  float scale = 0.0f;
  QuantizeRows(WeightQuantization::kInt8, w.data(), 1, 2, q.data(), &scale);
  EXPECT_EQ(scale, F16ToF32(1));
  EXPECT_EQ(q[0], 0);
  EXPECT_EQ(q[1], 0);
}

}  // namespace
}  // namespace tessera
