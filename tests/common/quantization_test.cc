#include "common/quantization.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(QuantizationTest, ParsesTheFlagSpellings) {
  EXPECT_EQ(*ParseWeightQuantization(""), WeightQuantization::kNone);
  EXPECT_EQ(*ParseWeightQuantization("int8"), WeightQuantization::kInt8);
  EXPECT_EQ(*ParseWeightQuantization("fp8"), WeightQuantization::kFp8);
  const auto bad = ParseWeightQuantization("int3");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("int3"), std::string::npos);

  EXPECT_EQ(*ParseKvCacheDType("auto"), KvCacheDType::kAuto);
  EXPECT_EQ(*ParseKvCacheDType("bf16"), KvCacheDType::kBF16);
  EXPECT_EQ(*ParseKvCacheDType("fp8_e4m3"), KvCacheDType::kFp8);
  EXPECT_EQ(*ParseKvCacheDType("fp32"), KvCacheDType::kF32);
  EXPECT_FALSE(ParseKvCacheDType("fp16x").ok());
  for (auto d : {KvCacheDType::kAuto, KvCacheDType::kF32, KvCacheDType::kBF16, KvCacheDType::kFp8}) {
    EXPECT_EQ(*ParseKvCacheDType(KvCacheDTypeName(d)), d);
  }
}

TEST(QuantizationTest, AutoKvCacheKeepsTheModelsSixteenBitType) {
  EXPECT_EQ(ResolveKvCacheDType(KvCacheDType::kAuto, DType::kBF16), DType::kBF16);
  EXPECT_EQ(ResolveKvCacheDType(KvCacheDType::kAuto, DType::kF16), DType::kBF16);
  EXPECT_EQ(ResolveKvCacheDType(KvCacheDType::kAuto, DType::kF32), DType::kF32);
  EXPECT_EQ(ResolveKvCacheDType(KvCacheDType::kFp8, DType::kF32), DType::kF8E4M3);
}

}  // namespace
}  // namespace tessera
