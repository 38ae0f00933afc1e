#include "common/model_config.h"

#include "gtest/gtest.h"
#include "tests/support/test_model.h"

namespace tessera {
namespace {

TEST(ModelConfigTest, LoadsStories260K) {
  TESSERA_REQUIRE_STORIES_MODEL();
  auto config = ModelConfig::Load(testing::StoriesModelDir());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->hidden_size, 64);
  EXPECT_EQ(config->intermediate_size, 172);
  EXPECT_EQ(config->num_attention_heads, 8);
  EXPECT_EQ(config->num_key_value_heads, 4);
  EXPECT_EQ(config->head_dim, 8);
  EXPECT_EQ(config->num_hidden_layers, 5);
  EXPECT_EQ(config->vocab_size, 512);
  EXPECT_EQ(config->max_position_embeddings, 512);
  EXPECT_FLOAT_EQ(config->rms_norm_eps, 1e-5f);
  EXPECT_FLOAT_EQ(config->rope_theta, 10000.0f);
  EXPECT_TRUE(config->tie_word_embeddings);
  EXPECT_EQ(config->bos_token_id, 1);
  EXPECT_EQ(config->eos_token_ids, std::vector<int>{2});
}

TEST(ModelConfigTest, RoundTripsThroughJson) {
  ModelConfig c;
  c.hidden_size = 4096;
  c.intermediate_size = 14336;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.head_dim = 128;
  c.num_hidden_layers = 2;
  c.vocab_size = 128256;
  c.max_position_embeddings = 8192;
  c.rope_theta = 500000;
  c.eos_token_ids = {128001, 128009};
  c.torch_dtype = DType::kBF16;
  auto back = ModelConfig::FromJson(c.ToJson(), "mem");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->intermediate_size, 14336);
  EXPECT_EQ(back->num_key_value_heads, 8);
  EXPECT_EQ(back->eos_token_ids, (std::vector<int>{128001, 128009}));
  EXPECT_EQ(back->torch_dtype, DType::kBF16);
  EXPECT_FLOAT_EQ(back->rope_theta, 500000.0f);
}

TEST(ModelConfigTest, DefaultsHeadDimAndKvHeads) {
  auto c = ModelConfig::FromJson(
      R"({"hidden_size": 64, "intermediate_size": 100, "num_attention_heads": 4,
          "num_hidden_layers": 1, "vocab_size": 10})",
      "cfg");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->num_key_value_heads, 4);
}

struct BadConfig {
  const char* json;
  const char* expected;  // Substring of the error.
};

class ModelConfigErrorTest : public ::testing::TestWithParam<BadConfig> {};

TEST_P(ModelConfigErrorTest, NamesTheProblem) {
  auto c = ModelConfig::FromJson(GetParam().json, "/m/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("/m/config.json"), std::string::npos) << c.status();
  EXPECT_NE(c.status().message().find(GetParam().expected), std::string::npos) << c.status();
}

constexpr char kBase[] =
    R"("intermediate_size": 100, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 10)";

INSTANTIATE_TEST_SUITE_P(
    All, ModelConfigErrorTest,
    ::testing::Values(
        BadConfig{"{not json", "not a valid JSON"},
        BadConfig{R"({"num_attention_heads": 4})", "missing field \"hidden_size\""},
        BadConfig{R"({"hidden_size": "64", "intermediate_size": 1, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 10})",
                  "must be an integer"},
        BadConfig{R"({"architectures": ["GPT2LMHeadModel"], "hidden_size": 64})",
                  "unsupported architecture"},
        BadConfig{R"({"hidden_size": 64, "num_key_value_heads": 3, "intermediate_size": 100, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 10})",
                  "not a multiple of num_key_value_heads"},
        BadConfig{R"({"hidden_size": 0, "intermediate_size": 100, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 10})",
                  "\"hidden_size\" must be positive"},
        BadConfig{R"({"hidden_size": 64, "eos_token_id": 99, "intermediate_size": 100, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 10})",
                  "eos_token_id 99 outside the vocabulary"}));

}  // namespace
}  // namespace tessera
