#include "common/dtype.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(DTypeTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(F32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Bf16ToF32(0x3f80), 1.0f);
  // 1 + 2^-8 is halfway between two bf16 values: ties go to even (1.0).
  EXPECT_EQ(F32ToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(F32ToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DTypeTest, F16RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t half = static_cast<uint16_t>(h);
    const float f = F16ToF32(half);
    if (std::isnan(f)) continue;
    EXPECT_EQ(F32ToF16(f), half) << "half bits " << h;
  }
}

TEST(DTypeTest, F16RoundsAndSaturates) {
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(1e6f), 0x7c00);
  EXPECT_EQ(F32ToF16(-1e6f), 0xfc00);
  EXPECT_EQ(F32ToF16(1e-9f), 0x0000);
  EXPECT_NEAR(F16ToF32(F32ToF16(0.1f)), 0.1f, 1e-4f);
}

TEST(DTypeTest, ParsesSafetensorsNames) {
  DType t;
  EXPECT_TRUE(ParseDType("BF16", &t));
  EXPECT_EQ(t, DType::kBF16);
  EXPECT_FALSE(ParseDType("F64", &t));
  EXPECT_FALSE(ParseDType("bf16", &t));
}

}  // namespace
}  // namespace tessera
