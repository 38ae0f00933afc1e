#include "common/dtype.h"

#include <cmath>
#include <limits>
#include <vector>

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

TEST(DTypeTest, Fp8E4M3DecodesTheOcpFormat) {
  EXPECT_EQ(Fp8E4M3ToF32(0x00), 0.0f);
  EXPECT_EQ(Fp8E4M3ToF32(0x38), 1.0f);            // exponent 7 = bias
  EXPECT_EQ(Fp8E4M3ToF32(0x7e), 448.0f);          // largest finite
  EXPECT_EQ(Fp8E4M3ToF32(0xfe), -448.0f);
  EXPECT_EQ(Fp8E4M3ToF32(0x01), 1.0f / 512.0f);   // smallest subnormal
  EXPECT_EQ(Fp8E4M3ToF32(0x08), 1.0f / 64.0f);    // smallest normal
  EXPECT_TRUE(std::isnan(Fp8E4M3ToF32(0x7f)));
  EXPECT_TRUE(std::isnan(Fp8E4M3ToF32(0xff)));
}

TEST(DTypeTest, Fp8E4M3RoundTripsEveryValueAndRoundsToNearestEven) {
  std::vector<float> finite;  // Every non-negative finite value, ascending.
  for (int b = 0; b < 0x7f; ++b) {
    const float f = Fp8E4M3ToF32(static_cast<uint8_t>(b));
    EXPECT_EQ(F32ToFp8E4M3(f), b) << "byte " << b;
    EXPECT_EQ(F32ToFp8E4M3(-f), b | 0x80) << "byte " << b;
    finite.push_back(f);
  }
  // Midpoints go to the even code, points just off them to the nearer one.
  for (size_t i = 0; i + 1 < finite.size(); ++i) {
    const float mid = 0.5f * (finite[i] + finite[i + 1]);
    const int even = (i % 2 == 0) ? static_cast<int>(i) : static_cast<int>(i + 1);
    EXPECT_EQ(F32ToFp8E4M3(mid), even) << "between codes " << i << " and " << i + 1;
    EXPECT_EQ(F32ToFp8E4M3(std::nextafter(mid, 0.0f)), static_cast<int>(i));
    EXPECT_EQ(F32ToFp8E4M3(std::nextafter(mid, 1e9f)), static_cast<int>(i + 1));
  }
  EXPECT_EQ(F32ToFp8E4M3(1e6f), 0x7e);  // Saturates.
  EXPECT_EQ(F32ToFp8E4M3(-1e6f), 0xfe);
  EXPECT_EQ(F32ToFp8E4M3(1e-6f), 0x00);
}

TEST(DTypeTest, ParsesSafetensorsNames) {
  DType t;
  EXPECT_TRUE(ParseDType("BF16", &t));
  EXPECT_EQ(t, DType::kBF16);
  EXPECT_TRUE(ParseDType("F8_E4M3", &t));
  EXPECT_EQ(t, DType::kF8E4M3);
  EXPECT_TRUE(ParseDType("I8", &t));
  EXPECT_EQ(t, DType::kI8);
  EXPECT_EQ(DTypeSize(DType::kF8E4M3), 1u);
  EXPECT_FALSE(ParseDType("F64", &t));
  EXPECT_FALSE(ParseDType("bf16", &t));
  EXPECT_TRUE(ParseDType("I32", &t));  // GPTQ/AWQ packed words.
  EXPECT_EQ(t, DType::kI32);
  EXPECT_EQ(DTypeSize(DType::kI32), 4u);
  EXPECT_FALSE(ParseDType("U4", &t));  // In-memory only.
}

TEST(DTypeTest, PackedFourBitCodes) {
  // Half a byte each: sizes go through DTypeBytes, odd counts rounding up.
  EXPECT_EQ(DTypeSize(DType::kU4), 0u);
  EXPECT_EQ(DTypeBytes(DType::kU4, 6), 3u);
  EXPECT_EQ(DTypeBytes(DType::kU4, 5), 3u);
  EXPECT_EQ(DTypeBytes(DType::kBF16, 5), 10u);
  const float codes[5] = {0.0f, 15.0f, 7.0f, 20.0f, -3.0f};  // The last two saturate.
  uint8_t packed[3] = {0xff, 0xff, 0xff};
  ConvertFromF32(codes, 5, DType::kU4, packed);
  EXPECT_EQ(packed[0], 0xf0);  // Low nibble = even element.
  EXPECT_EQ(packed[1], 0xf7);
  EXPECT_EQ(packed[2] & 0x0f, 0x0);
  float back[5];
  ConvertToF32(packed, DType::kU4, 5, back);
  const float expected[5] = {0.0f, 15.0f, 7.0f, 15.0f, 0.0f};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(back[i], expected[i]) << i;
}

}  // namespace
}  // namespace tessera
