// The real-model presets of gen-checkpoint (llama3.1-8b, llama3.1-70b-layers, qwen2.5-7b,
// qwen3-8b, qwen3-30b-a3b, qwen3-235b-a22b-layers, mixtral-8x7b-layers): their configs are
// the real models', and a checkpoint generated from them at the real vocabulary (hidden and
// expert sizes shrunk so the test stays small) loads with its byte-level tokenizer and
// generation_config.json, and runs the same at tp 1 and tp 2.
#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "common/generation_config.h"
#include "common/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/support/test_model.h"
#include "tools/checkpoint/generate.h"
#include "worker/comm/local_communicator.h"
#include "worker/llama_model.h"

namespace tessera {
namespace {

TEST(PresetCheckpointTest, RealPresetsCarryTheRealConfigs) {
  auto llama = PresetConfig("llama3.1-8b");
  ASSERT_TRUE(llama.ok()) << llama.status();
  EXPECT_EQ(llama->hidden_size, 4096);
  EXPECT_EQ(llama->vocab_size, 128256);
  EXPECT_EQ(llama->max_position_embeddings, 131072);
  EXPECT_EQ(llama->rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(llama->rope_scaling.factor, 8);
  EXPECT_EQ(llama->rope_scaling.low_freq_factor, 1);
  EXPECT_EQ(llama->rope_scaling.high_freq_factor, 4);
  EXPECT_EQ(llama->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(llama->bos_token_id, 128000);
  EXPECT_EQ(llama->eos_token_ids, (std::vector<int>{128001, 128008, 128009}));

  auto big = PresetConfig("llama3.1-70b-layers");
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(big->hidden_size, 8192);
  EXPECT_EQ(big->intermediate_size, 28672);
  EXPECT_EQ(big->num_attention_heads, 64);
  EXPECT_EQ(big->num_key_value_heads, 8);
  EXPECT_EQ(big->rope_scaling.type, RopeScaling::Type::kLlama3);

  auto qwen = PresetConfig("qwen2.5-7b");
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  EXPECT_EQ(qwen->architecture, "Qwen2ForCausalLM");
  EXPECT_EQ(qwen->hidden_size, 3584);
  EXPECT_EQ(qwen->intermediate_size, 18944);
  EXPECT_EQ(qwen->num_attention_heads, 28);
  EXPECT_EQ(qwen->num_key_value_heads, 4);
  EXPECT_EQ(qwen->head_dim, 128);
  EXPECT_EQ(qwen->vocab_size, 152064);
  EXPECT_EQ(qwen->rope_theta, 1e6f);
  EXPECT_TRUE(qwen->qkv_bias);
  EXPECT_FALSE(qwen->tie_word_embeddings);
  EXPECT_EQ(qwen->bos_token_id, -1);
  EXPECT_EQ(qwen->eos_token_ids, (std::vector<int>{151645, 151643}));

  auto qwen3 = PresetConfig("qwen3-8b");
  ASSERT_TRUE(qwen3.ok()) << qwen3.status();
  EXPECT_EQ(qwen3->architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(qwen3->hidden_size, 4096);
  EXPECT_EQ(qwen3->intermediate_size, 12288);
  EXPECT_EQ(qwen3->num_hidden_layers, 36);
  EXPECT_EQ(qwen3->num_attention_heads, 32);
  EXPECT_EQ(qwen3->num_key_value_heads, 8);
  EXPECT_EQ(qwen3->head_dim, 128);
  EXPECT_EQ(qwen3->vocab_size, 151936);
  EXPECT_EQ(qwen3->max_position_embeddings, 40960);
  EXPECT_EQ(qwen3->rope_theta, 1e6f);
  EXPECT_EQ(qwen3->rms_norm_eps, 1e-6f);
  EXPECT_TRUE(qwen3->qk_norm);
  EXPECT_FALSE(qwen3->qkv_bias);
  EXPECT_FALSE(qwen3->tie_word_embeddings);
  EXPECT_FALSE(qwen3->is_moe());
  EXPECT_EQ(qwen3->bos_token_id, -1);
  EXPECT_EQ(qwen3->eos_token_ids, (std::vector<int>{151645}));

  auto a3b = PresetConfig("qwen3-30b-a3b");
  ASSERT_TRUE(a3b.ok()) << a3b.status();
  EXPECT_EQ(a3b->architecture, "Qwen3MoeForCausalLM");
  EXPECT_EQ(a3b->hidden_size, 2048);
  EXPECT_EQ(a3b->intermediate_size, 6144);
  EXPECT_EQ(a3b->num_hidden_layers, 48);
  EXPECT_EQ(a3b->num_attention_heads, 32);
  EXPECT_EQ(a3b->num_key_value_heads, 4);
  EXPECT_EQ(a3b->head_dim, 128);
  EXPECT_EQ(a3b->moe.num_experts, 128);
  EXPECT_EQ(a3b->moe.top_k, 8);
  EXPECT_EQ(a3b->moe.intermediate_size, 768);
  EXPECT_TRUE(a3b->moe.normalize_top_k);
  EXPECT_EQ(a3b->NumMoeLayers(), 48);
  EXPECT_TRUE(a3b->qk_norm);
  // About 30.5 B parameters, 3.3 B of them active per token.
  EXPECT_NEAR(a3b->NumParameters() / 1e9, 30.5, 0.2);
  EXPECT_NEAR(a3b->NumActiveParameters() / 1e9, 3.3, 0.1);

  auto a22b = PresetConfig("qwen3-235b-a22b-layers");
  ASSERT_TRUE(a22b.ok()) << a22b.status();
  EXPECT_EQ(a22b->hidden_size, 4096);
  EXPECT_EQ(a22b->num_attention_heads, 64);
  EXPECT_EQ(a22b->num_key_value_heads, 4);
  EXPECT_EQ(a22b->moe.num_experts, 128);
  EXPECT_EQ(a22b->moe.top_k, 8);
  EXPECT_EQ(a22b->moe.intermediate_size, 1536);
  EXPECT_EQ(a22b->num_hidden_layers, 2);
  // At its 94 layers, the real model's 235 B parameters, 22 B active.
  auto full = PresetConfig("qwen3-235b-a22b-layers", 94);
  ASSERT_TRUE(full.ok());
  EXPECT_NEAR(full->NumParameters() / 1e9, 235.1, 0.5);
  EXPECT_NEAR(full->NumActiveParameters() / 1e9, 22.1, 0.3);

  auto mixtral = PresetConfig("mixtral-8x7b-layers");
  ASSERT_TRUE(mixtral.ok()) << mixtral.status();
  EXPECT_EQ(mixtral->architecture, "MixtralForCausalLM");
  EXPECT_EQ(mixtral->hidden_size, 4096);
  EXPECT_EQ(mixtral->num_attention_heads, 32);
  EXPECT_EQ(mixtral->num_key_value_heads, 8);
  EXPECT_EQ(mixtral->vocab_size, 32000);
  EXPECT_EQ(mixtral->rope_theta, 1e6f);
  EXPECT_EQ(mixtral->sliding_window, 0);
  EXPECT_EQ(mixtral->moe.num_experts, 8);
  EXPECT_EQ(mixtral->moe.top_k, 2);
  EXPECT_EQ(mixtral->moe.intermediate_size, 14336);
  auto mixtral_full = PresetConfig("mixtral-8x7b-layers", 32);
  ASSERT_TRUE(mixtral_full.ok());
  EXPECT_NEAR(mixtral_full->NumParameters() / 1e9, 46.7, 0.1);
  EXPECT_NEAR(mixtral_full->NumActiveParameters() / 1e9, 12.9, 0.1);
}

// Greedy logits of a few steps on `world` ranks (rank 0's).
std::vector<float> RunLogits(const std::filesystem::path& dir, int world,
                             const std::vector<int32_t>& prompt) {
  auto group = LocalGroup::Create(world, std::chrono::seconds(60));
  std::vector<std::vector<float>> out(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      LocalCommunicator comm(group, rank);
      auto backend = kernels::MakeCpuBackend(1);
      auto model = LlamaModel::Load(dir, backend.get(), &comm);
      ASSERT_TRUE(model.ok()) << model.status();
      auto cache = (*model)->CreateKvCache(4, 16);
      ASSERT_TRUE(cache.ok()) << cache.status();
      StepBatch b;
      b.max_blocks_per_seq = 3;
      b.AddSequence(prompt, {1, 2, 3}, 0, static_cast<int>(prompt.size()), 16, true);
      ASSERT_TRUE((*model)->Forward(b, cache->get(), &out[rank]).ok());
    });
  }
  for (auto& t : threads) t.join();
  return out[0];
}

class RealVocabPresetTest : public ::testing::TestWithParam<const char*> {};

TEST_P(RealVocabPresetTest, LoadsWithItsTokenizerAndMatchesAcrossRanks) {
  auto config = PresetConfig(GetParam(), /*num_layers=*/2);
  ASSERT_TRUE(config.ok()) << config.status();
  config->hidden_size = 64;
  config->intermediate_size = 150;
  config->num_attention_heads = 4;
  config->num_key_value_heads = 2;
  config->head_dim = 16;
  if (config->is_moe()) {
    // The real expert count and top k; small experts.
    config->moe.intermediate_size = 8;
    if (config->architecture == "MixtralForCausalLM") config->intermediate_size = 8;
  }
  const auto dir = testing::ScratchDir("model");
  GenerateOptions options;
  options.out_dir = dir;
  options.dtype = DType::kF32;
  ASSERT_TRUE(GenerateRandomCheckpoint(*config, options).ok());

  auto generation = GenerationConfig::LoadIfPresent(dir, *config);
  ASSERT_TRUE(generation.ok()) << generation.status();
  const bool qwen3 = absl::StartsWith(config->architecture, "Qwen3");
  const bool qwen = qwen3 || config->architecture == "Qwen2ForCausalLM";
  if (qwen3) {
    // Qwen3's config.json names <|im_end|> only; its generation config adds <|endoftext|>.
    EXPECT_EQ(generation->eos_token_ids, (std::vector<int32_t>{151645, 151643}));
  } else {
    EXPECT_EQ(generation->eos_token_ids, std::vector<int32_t>(config->eos_token_ids.begin(),
                                                              config->eos_token_ids.end()));
  }
  EXPECT_FLOAT_EQ(generation->temperature.value_or(-1), qwen && !qwen3 ? 0.7f : 0.6f);
  EXPECT_FLOAT_EQ(generation->top_p.value_or(-1), qwen3 ? 0.95f : qwen ? 0.8f : 0.9f);

  auto tokenizer = Tokenizer::Load(dir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const std::vector<int32_t> prompt =
      (*tokenizer)->Encode("Once upon a time, 12345 caf\xC3\xA9", /*add_special_tokens=*/true);
  ASSERT_GT(prompt.size(), 1u);
  ASSERT_LE(prompt.size(), 48u);  // Fits the 3 blocks RunLogits gives the sequence.
  if (qwen) {
    EXPECT_NE(prompt[0], 151643) << "Qwen adds no BOS";
  } else {
    EXPECT_EQ(prompt[0], 128000) << "Llama 3 prompts start with <|begin_of_text|>";
  }
  for (int32_t id : prompt) ASSERT_LT(id, config->vocab_size);

  const std::vector<float> one = RunLogits(dir, 1, prompt);
  const std::vector<float> two = RunLogits(dir, 2, prompt);
  ASSERT_EQ(one.size(), static_cast<size_t>(config->vocab_size));
  ASSERT_EQ(two.size(), one.size());
  float worst = 0;
  for (size_t i = 0; i < one.size(); ++i) {
    worst = std::max(worst, std::abs(one[i] - two[i]) / std::max(1.0f, std::abs(one[i])));
  }
  EXPECT_LT(worst, 1e-5f);
}

INSTANTIATE_TEST_SUITE_P(Presets, RealVocabPresetTest,
                         ::testing::Values("llama3.1-8b", "llama3.1-70b-layers", "qwen2.5-7b",
                                           "qwen3-8b", "qwen3-30b-a3b"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '.', '_');
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace tessera
