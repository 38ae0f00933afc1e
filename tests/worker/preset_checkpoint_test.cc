// The real-model presets of gen-checkpoint (llama3.1-8b, llama3.1-70b-layers, qwen2.5-7b):
// their configs are the real models', and a checkpoint generated from them at the real
// vocabulary (hidden sizes shrunk so the test stays small) loads with its byte-level
// tokenizer and generation_config.json, and runs the same at tp 1 and tp 2.
#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

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
  const auto dir = testing::ScratchDir("model");
  GenerateOptions options;
  options.out_dir = dir;
  options.dtype = DType::kF32;
  ASSERT_TRUE(GenerateRandomCheckpoint(*config, options).ok());

  auto generation = GenerationConfig::LoadIfPresent(dir, *config);
  ASSERT_TRUE(generation.ok()) << generation.status();
  const bool qwen = config->architecture == "Qwen2ForCausalLM";
  EXPECT_EQ(generation->eos_token_ids, std::vector<int32_t>(config->eos_token_ids.begin(),
                                                            config->eos_token_ids.end()));
  EXPECT_FLOAT_EQ(generation->temperature.value_or(-1), qwen ? 0.7f : 0.6f);
  EXPECT_FLOAT_EQ(generation->top_p.value_or(-1), qwen ? 0.8f : 0.9f);

  auto tokenizer = Tokenizer::Load(dir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const std::vector<int32_t> prompt =
      (*tokenizer)->Encode("Once upon a time, 12345 caf\xC3\xA9", /*add_special_tokens=*/true);
  ASSERT_GT(prompt.size(), 1u);
  ASSERT_LE(prompt.size(), 48u);  // Fits the 3 blocks RunLogits gives the sequence.
  if (qwen) {
    EXPECT_NE(prompt[0], 151643) << "Qwen2 adds no BOS";
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
                         ::testing::Values("llama3.1-8b", "llama3.1-70b-layers", "qwen2.5-7b"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '.', '_');
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace tessera
