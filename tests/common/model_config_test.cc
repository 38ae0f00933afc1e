#include "common/model_config.h"

#include <cmath>
#include <numbers>
#include <string>

#include "absl/strings/str_cat.h"
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
                  "eos_token_id 99 outside the vocabulary"},
        BadConfig{R"({"hidden_size": 64, "rope_scaling": {"rope_type": "longrope", "factor": 2}, "intermediate_size": 100, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 10})",
                  "unsupported rope_type \"longrope\""},
        BadConfig{R"({"hidden_size": 64, "rope_scaling": {"factor": 2}, "intermediate_size": 100, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 10})",
                  "missing field \"rope_type\""},
        BadConfig{R"({"hidden_size": 64, "rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4}, "intermediate_size": 100, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 10})",
                  "needs field \"original_max_position_embeddings\""},
        BadConfig{R"({"hidden_size": 64, "rope_scaling": {"type": "linear"}, "intermediate_size": 100, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 10})",
                  "needs field \"factor\""},
        BadConfig{R"({"hidden_size": 64, "rope_scaling": {"type": "yarn", "factor": "4"}, "intermediate_size": 100, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 10})",
                  "\"factor\" must be a number"},
        BadConfig{R"({"hidden_size": 64, "rope_scaling": {"type": "dynamic", "factor": -1}, "intermediate_size": 100, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 10})",
                  "\"factor\" must be positive"},
        BadConfig{R"({"hidden_size": 64, "partial_rotary_factor": 0.5, "intermediate_size": 100, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 10})",
                  "partial_rotary_factor 0.5 is not supported"},
        BadConfig{R"({"hidden_size": 64, "mlp_bias": true, "intermediate_size": 100, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 10})",
                  "mlp_bias"},
        BadConfig{R"({"architectures": ["Qwen2ForCausalLM"], "use_sliding_window": true, "hidden_size": 64, "intermediate_size": 100, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 10})",
                  "missing field \"sliding_window\""},
        BadConfig{R"({"architectures": ["Qwen3MoeForCausalLM"], "num_experts_per_tok": 2, "moe_intermediate_size": 8, "hidden_size": 64, "intermediate_size": 100, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 10})",
                  "missing field \"num_experts\""},
        BadConfig{R"({"architectures": ["MixtralForCausalLM"], "num_local_experts": 8, "num_experts_per_tok": 9, "hidden_size": 64, "intermediate_size": 100, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 10})",
                  "num_experts_per_tok 9 must be in 1..8"},
        BadConfig{R"({"architectures": ["Qwen3MoeForCausalLM"], "num_experts": 4, "num_experts_per_tok": 2, "hidden_size": 64, "intermediate_size": 100, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 10})",
                  "missing field \"moe_intermediate_size\""},
        BadConfig{R"({"architectures": ["Qwen2MoeForCausalLM"], "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 8, "hidden_size": 64, "intermediate_size": 100, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 10})",
                  "missing field \"shared_expert_intermediate_size\""},
        BadConfig{R"({"architectures": ["Qwen3MoeForCausalLM"], "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 8, "mlp_only_layers": [3], "hidden_size": 64, "intermediate_size": 100, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 10})",
                  "\"mlp_only_layers\" holds 3"}));

constexpr char kShape[] =
    R"("hidden_size": 64, "intermediate_size": 100, "num_attention_heads": 4, "num_hidden_layers": 30, "vocab_size": 10)";

ModelConfig Parse(const std::string& fields) {
  auto c = ModelConfig::FromJson(absl::StrCat("{", kShape, ", ", fields, "}"), "cfg");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : ModelConfig{};
}

TEST(ModelConfigTest, Qwen2HasQkvBiasesAndNoBosAndItsWindowRule) {
  ModelConfig c = Parse(R"("architectures": ["Qwen2ForCausalLM"], "sliding_window": 4096,
                           "use_sliding_window": false, "tie_word_embeddings": true)");
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.SlidingWindowOf(29), 0);  // Released Qwen2 models: no window at all.
  c = Parse(R"("architectures": ["Qwen2ForCausalLM"], "sliding_window": 8,
               "use_sliding_window": true, "max_window_layers": 20)");
  EXPECT_EQ(c.SlidingWindowOf(19), 0);
  EXPECT_EQ(c.SlidingWindowOf(20), 8);
  auto back = ModelConfig::FromJson(c.ToJson(), "round trip");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->SlidingWindowOf(19), 0);
  EXPECT_EQ(back->SlidingWindowOf(20), 8);
  EXPECT_TRUE(back->qkv_bias);
  EXPECT_EQ(back->bos_token_id, -1);
}

TEST(ModelConfigTest, MistralWindowOnEveryLayerAndNullMeansNone) {
  EXPECT_EQ(Parse(R"("architectures": ["MistralForCausalLM"], "sliding_window": 4096)")
                .SlidingWindowOf(0),
            4096);
  EXPECT_EQ(Parse(R"("architectures": ["MistralForCausalLM"], "sliding_window": null)")
                .SlidingWindowOf(0),
            0);
  // Llama has no sliding window: the field is not Llama's.
  EXPECT_EQ(Parse(R"("sliding_window": 16)").SlidingWindowOf(0), 0);
}

TEST(ModelConfigTest, LlamaAttentionBiasCoversQkvAndO) {
  const ModelConfig c = Parse(R"("attention_bias": true)");
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.o_bias);
  auto back = ModelConfig::FromJson(c.ToJson(), "round trip");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->o_bias);
}

TEST(ModelConfigTest, RopeScalingRoundTripsWithLegacyTypeKey) {
  const ModelConfig c = Parse(R"("rope_scaling": {"type": "yarn", "factor": 4.0,
                                                   "original_max_position_embeddings": 32768})");
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kYarn);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 32768);
  auto back = ModelConfig::FromJson(c.ToJson(), "round trip");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->rope_scaling.type, RopeScaling::Type::kYarn);
  EXPECT_DOUBLE_EQ(back->rope_scaling.factor, 4.0);
  EXPECT_EQ(back->rope_scaling.original_max_position_embeddings, 32768);
}

// Llama 3.1's published values: frequencies with wavelengths under 8192 / 4 are kept, over
// 8192 divided by 8, the band between blended.
TEST(RopeFrequenciesTest, Llama3KeepsHighDividesLowBlendsBetween) {
  RopeScaling r;
  r.type = RopeScaling::Type::kLlama3;
  r.factor = 8;
  r.low_freq_factor = 1;
  r.high_freq_factor = 4;
  r.original_max_position_embeddings = 8192;
  const RopeFrequencies f = ComputeRopeFrequencies(r, 128, 500000.0, 131072);
  const RopeFrequencies plain = ComputeRopeFrequencies(RopeScaling{}, 128, 500000.0, 131072);
  ASSERT_EQ(f.inv_freq.size(), 64u);
  EXPECT_EQ(f.attention_scaling, 1.0f);
  int kept = 0, divided = 0, blended = 0;
  for (int i = 0; i < 64; ++i) {
    const double wavelen = 2 * std::numbers::pi / plain.inv_freq[i];
    if (wavelen < 2048) {
      EXPECT_EQ(f.inv_freq[i], plain.inv_freq[i]) << i;
      ++kept;
    } else if (wavelen > 8192) {
      EXPECT_FLOAT_EQ(f.inv_freq[i], plain.inv_freq[i] / 8) << i;
      ++divided;
    } else {
      EXPECT_LT(f.inv_freq[i], plain.inv_freq[i]) << i;
      EXPECT_GT(f.inv_freq[i], plain.inv_freq[i] / 8) << i;
      ++blended;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
}

TEST(RopeFrequenciesTest, LinearDynamicAndYarn) {
  const RopeFrequencies plain = ComputeRopeFrequencies(RopeScaling{}, 64, 10000.0, 2048);
  EXPECT_FLOAT_EQ(plain.inv_freq[1], static_cast<float>(std::pow(10000.0, -2.0 / 64)));
  RopeScaling linear;
  linear.type = RopeScaling::Type::kLinear;
  linear.factor = 4;
  const RopeFrequencies lin = ComputeRopeFrequencies(linear, 64, 10000.0, 2048);
  for (int i = 0; i < 32; ++i) EXPECT_FLOAT_EQ(lin.inv_freq[i], plain.inv_freq[i] / 4);

  // Static NTK: base * (factor^2 - factor + 1)^(d / (d - 2)).
  RopeScaling dynamic = linear;
  dynamic.type = RopeScaling::Type::kDynamic;
  const RopeFrequencies dyn = ComputeRopeFrequencies(dynamic, 64, 10000.0, 2048);
  const double base = 10000.0 * std::pow(13.0, 64.0 / 62.0);
  EXPECT_FLOAT_EQ(dyn.inv_freq[0], 1.0f);
  EXPECT_FLOAT_EQ(dyn.inv_freq[5], static_cast<float>(std::pow(base, -10.0 / 64)));

  RopeScaling yarn = linear;
  yarn.type = RopeScaling::Type::kYarn;
  yarn.original_max_position_embeddings = 512;
  const RopeFrequencies y = ComputeRopeFrequencies(yarn, 64, 10000.0, 2048);
  EXPECT_FLOAT_EQ(y.attention_scaling, static_cast<float>(0.1 * std::log(4.0) + 1));
  EXPECT_EQ(y.inv_freq[0], plain.inv_freq[0]);            // Fast dims extrapolate.
  EXPECT_FLOAT_EQ(y.inv_freq[31], plain.inv_freq[31] / 4);  // Slow dims interpolate.
  yarn.attention_factor = 1.5;
  EXPECT_EQ(ComputeRopeFrequencies(yarn, 64, 10000.0, 2048).attention_scaling, 1.5f);
}

TEST(ModelConfigTest, Qwen3HasQkNormsItsOwnHeadDimAndNoBos) {
  const ModelConfig c = Parse(R"("architectures": ["Qwen3ForCausalLM"], "head_dim": 32)");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 32);  // Not hidden / heads (16).
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_FALSE(c.is_moe());
  auto back = ModelConfig::FromJson(c.ToJson(), "round trip");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->qk_norm);
  EXPECT_EQ(back->head_dim, 32);
}

// transformers' Qwen3Config default, where Llama's would be hidden / heads (16 here).
TEST(ModelConfigTest, Qwen3HeadDimDefaultsTo128) {
  EXPECT_EQ(Parse(R"("architectures": ["Qwen3ForCausalLM"])").head_dim, 128);
  EXPECT_EQ(Parse(R"("architectures": ["Qwen3MoeForCausalLM"], "num_experts": 4,
                     "num_experts_per_tok": 2, "moe_intermediate_size": 8)")
                .head_dim,
            128);
}

TEST(ModelConfigTest, QwenMoeWindowRules) {
  // Qwen3-MoE: every layer, whatever max_window_layers says.
  const ModelConfig c = Parse(R"("architectures": ["Qwen3MoeForCausalLM"], "num_experts": 4,
                                 "num_experts_per_tok": 2, "moe_intermediate_size": 8,
                                 "use_sliding_window": true, "sliding_window": 6,
                                 "max_window_layers": 20)");
  EXPECT_EQ(c.SlidingWindowOf(0), 6);
  EXPECT_EQ(c.SlidingWindowOf(29), 6);
  auto back = ModelConfig::FromJson(c.ToJson(), "round trip");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->SlidingWindowOf(0), 6);
  // Qwen2-MoE: refused rather than guessed.
  auto q2 = ModelConfig::FromJson(
      absl::StrCat("{", kShape, R"(, "architectures": ["Qwen2MoeForCausalLM"], "num_experts": 4,
                   "num_experts_per_tok": 2, "moe_intermediate_size": 8,
                   "shared_expert_intermediate_size": 8, "use_sliding_window": true,
                   "sliding_window": 6})"),
      "cfg");
  ASSERT_FALSE(q2.ok());
  EXPECT_NE(q2.status().message().find("use_sliding_window true is not supported"),
            std::string::npos)
      << q2.status();
}

TEST(ModelConfigTest, Qwen2MoeQkvBiasField) {
  const ModelConfig c = Parse(R"("architectures": ["Qwen2MoeForCausalLM"], "num_experts": 4,
                                 "num_experts_per_tok": 2, "moe_intermediate_size": 8,
                                 "shared_expert_intermediate_size": 8, "qkv_bias": false)");
  EXPECT_FALSE(c.qkv_bias);
  auto back = ModelConfig::FromJson(c.ToJson(), "round trip");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->qkv_bias);
}

TEST(ModelConfigTest, MixtralRoutesEveryLayerAndAlwaysRenormalises) {
  const ModelConfig c = Parse(R"("architectures": ["MixtralForCausalLM"], "num_local_experts": 8,
                                 "num_experts_per_tok": 2, "sliding_window": null)");
  ASSERT_TRUE(c.is_moe());
  EXPECT_EQ(c.moe.num_experts, 8);
  EXPECT_EQ(c.moe.top_k, 2);
  EXPECT_EQ(c.moe.intermediate_size, 100);  // Mixtral's experts use intermediate_size.
  EXPECT_TRUE(c.moe.normalize_top_k);
  EXPECT_EQ(c.NumMoeLayers(), 30);
  EXPECT_FALSE(c.qkv_bias);
  // 30 layers of attention (4 * 64 * 64 each) + 8 experts of 3 * 64 * 100 + router 8 * 64.
  const int64_t shared = 30 * (4 * 64 * 64 + 2 * 64) + 2 * 10 * 64 + 64;
  EXPECT_EQ(c.NumParameters(), shared + 30 * (8 * 3 * 64 * 100 + 8 * 64));
  EXPECT_EQ(c.NumActiveParameters(), shared + 30 * (2 * 3 * 64 * 100 + 8 * 64));
}

TEST(ModelConfigTest, Qwen3MoeSparseStepDenseLayersAndNormTopkProb) {
  const ModelConfig c = Parse(R"("architectures": ["Qwen3MoeForCausalLM"], "num_experts": 16,
                                 "num_experts_per_tok": 4, "moe_intermediate_size": 24,
                                 "decoder_sparse_step": 2, "mlp_only_layers": [5],
                                 "norm_topk_prob": true)");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_TRUE(c.moe.normalize_top_k);
  EXPECT_FALSE(c.IsMoeLayer(0));  // (0 + 1) % 2 != 0.
  EXPECT_TRUE(c.IsMoeLayer(1));
  EXPECT_FALSE(c.IsMoeLayer(5));  // mlp_only_layers.
  EXPECT_TRUE(c.IsMoeLayer(7));
  EXPECT_EQ(c.NumMoeLayers(), 14);
  auto back = ModelConfig::FromJson(c.ToJson(), "round trip");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->NumMoeLayers(), 14);
  EXPECT_EQ(back->moe.intermediate_size, 24);
  EXPECT_EQ(back->NumParameters(), c.NumParameters());
  EXPECT_EQ(back->NumActiveParameters(), c.NumActiveParameters());
}

TEST(ModelConfigTest, Qwen2MoeSharedExpertAndNoRenormalisationByDefault) {
  const ModelConfig c = Parse(R"("architectures": ["Qwen2MoeForCausalLM"], "num_experts": 8,
                                 "num_experts_per_tok": 2, "moe_intermediate_size": 16,
                                 "shared_expert_intermediate_size": 40)");
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.moe.normalize_top_k);  // transformers' Qwen2MoeConfig default.
  EXPECT_EQ(c.moe.shared_intermediate_size, 40);
  auto back = ModelConfig::FromJson(c.ToJson(), "round trip");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->moe.shared_intermediate_size, 40);
  EXPECT_FALSE(back->moe.normalize_top_k);
}

}  // namespace
}  // namespace tessera
