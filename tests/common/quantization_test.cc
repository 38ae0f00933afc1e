#include "common/quantization.h"

#include "absl/strings/str_cat.h"
#include "common/checkpoint_quantization.h"
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


namespace tessera {
namespace {

std::string NameOf(const std::string& quantization_config) {
  auto name = CheckpointQuantizationName(
      absl::StrCat("{\"hidden_size\": 64, \"quantization_config\": ", quantization_config, "}"),
      "config.json");
  EXPECT_TRUE(name.ok()) << name.status();
  return name.ok() ? *name : "?";
}

TEST(CheckpointQuantizationTest, NamesWhatConfigJsonAnnounces) {
  EXPECT_EQ(*CheckpointQuantizationName("{\"hidden_size\": 64}", "c"), "");
  EXPECT_EQ(NameOf("null"), "");
  EXPECT_EQ(NameOf(R"({"quant_method": "fp8", "activation_scheme": "dynamic"})"), "fp8");
  EXPECT_EQ(NameOf(R"({"quant_method": "fbgemm_fp8", "modules_to_not_convert": ["lm_head"]})"), "fp8");
  EXPECT_EQ(NameOf(R"({"quant_method": "compressed-tensors", "config_groups": {"group_0":
                      {"weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}}})"),
            "fp8");
  // An int8 compressed-tensors model is not FP8: named as its method (the worker refuses it).
  EXPECT_EQ(NameOf(R"({"quant_method": "compressed-tensors", "config_groups": {"group_0":
                      {"weights": {"num_bits": 8, "type": "int", "strategy": "channel"}}}})"),
            "compressed-tensors");
  EXPECT_EQ(NameOf(R"({"quant_method": "gptq", "bits": 4})"), "gptq");
  EXPECT_EQ(NameOf(R"({"quant_method": "awq", "bits": 4})"), "awq");
  EXPECT_FALSE(CheckpointQuantizationName("[1]", "c").ok());
}

TEST(CheckpointQuantizationTest, LoadTimeQuantizationOnlyOnUnquantizedCheckpoints) {
  EXPECT_TRUE(CheckLoadTimeQuantization("int8", "", "m").ok());
  EXPECT_TRUE(CheckLoadTimeQuantization("none", "fp8", "m").ok());
  EXPECT_TRUE(CheckLoadTimeQuantization("", "gptq", "m").ok());
  const absl::Status s = CheckLoadTimeQuantization("int8", "fp8", "/models/llama-fp8");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("/models/llama-fp8 is already quantized (fp8"), std::string::npos) << s;
  EXPECT_NE(s.message().find("--quantization int8"), std::string::npos) << s;
}

}  // namespace
}  // namespace tessera
