// Reads the real stories260K weights through Checkpoint (label: integration).
#include <cstring>
#include <vector>

#include "common/checkpoint.h"
#include "common/model_config.h"
#include "gtest/gtest.h"
#include "tests/support/test_model.h"

namespace tessera {
namespace {

TEST(CheckpointStoriesTest, EveryTensorHasTheConfigShape) {
  TESSERA_REQUIRE_STORIES_MODEL();
  auto config = ModelConfig::Load(testing::StoriesModelDir());
  ASSERT_TRUE(config.ok()) << config.status();
  auto ckpt = Checkpoint::Open(testing::StoriesModelDir());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const int64_t h = config->hidden_size, inter = config->intermediate_size;
  const int64_t q = config->num_attention_heads * config->head_dim;
  const int64_t kv = config->num_key_value_heads * config->head_dim;
  std::vector<std::pair<std::string, std::vector<int64_t>>> expected = {
      {"model.embed_tokens.weight", {config->vocab_size, h}},
      {"model.norm.weight", {h}},
      {"lm_head.weight", {config->vocab_size, h}}};
  for (int l = 0; l < config->num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    expected.push_back({p + "input_layernorm.weight", {h}});
    expected.push_back({p + "post_attention_layernorm.weight", {h}});
    expected.push_back({p + "self_attn.q_proj.weight", {q, h}});
    expected.push_back({p + "self_attn.k_proj.weight", {kv, h}});
    expected.push_back({p + "self_attn.v_proj.weight", {kv, h}});
    expected.push_back({p + "self_attn.o_proj.weight", {h, q}});
    expected.push_back({p + "mlp.gate_proj.weight", {inter, h}});
    expected.push_back({p + "mlp.up_proj.weight", {inter, h}});
    expected.push_back({p + "mlp.down_proj.weight", {h, inter}});
  }
  uint64_t total = 0;
  for (const auto& [name, shape] : expected) {
    auto info = (*ckpt)->Info(name);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ((*info)->shape, shape) << name;
    EXPECT_EQ((*info)->dtype, DType::kF32) << name;
    std::vector<float> data((*info)->num_elements());
    ASSERT_TRUE((*ckpt)->ReadAll(name, shape, DType::kF32, data.data()).ok());
    total += data.size() * 4;
  }
  EXPECT_EQ((*ckpt)->bytes_read(), total);
  // The tied head is a copy of the embedding (README: written by hf_export).
  std::vector<float> embed(config->vocab_size * h), head(config->vocab_size * h);
  ASSERT_TRUE(
      (*ckpt)
          ->ReadAll("model.embed_tokens.weight", {config->vocab_size, h}, DType::kF32, embed.data())
          .ok());
  ASSERT_TRUE(
      (*ckpt)->ReadAll("lm_head.weight", {config->vocab_size, h}, DType::kF32, head.data()).ok());
  EXPECT_EQ(embed, head);
  // 260,032 parameters excluding the tied classifier, as the README says.
  EXPECT_EQ(config->NumParameters(), 260032);
}

}  // namespace
}  // namespace tessera
