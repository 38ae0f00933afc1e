// The `tessera gen-checkpoint` and `tessera convert-llama2c` entry points, called in-process.
#include <string>
#include <vector>

#include "common/checkpoint.h"
#include "common/model_config.h"
#include "gtest/gtest.h"
#include "tests/support/test_model.h"
#include "tools/tessera/commands.h"

namespace tessera {
namespace {

int Call(int (*main_fn)(int, char**), std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return main_fn(static_cast<int>(argv.size()), argv.data());
}

TEST(GenCheckpointCommandTest, WritesPresetWithOverrides) {
  const auto dir = testing::ScratchDir("gen");
  ASSERT_EQ(Call(cli::GenCheckpointMain, {"gen-checkpoint",
                                          "--preset",
                                          "tiny",
                                          "--out",
                                          dir.string(),
                                          "--dtype",
                                          "f16",
                                          "--layers",
                                          "3",
                                          "--shards",
                                          "2",
                                          "--seed",
                                          "5",
                                          "--hidden",
                                          "64",
                                          "--intermediate",
                                          "100",
                                          "--heads",
                                          "4",
                                          "--kv-heads",
                                          "1",
                                          "--head-dim",
                                          "8",
                                          "--vocab=400"}),
            0);
  auto config = ModelConfig::Load(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->num_hidden_layers, 3);
  EXPECT_EQ(config->hidden_size, 64);
  EXPECT_EQ(config->intermediate_size, 100);
  EXPECT_EQ(config->num_attention_heads, 4);
  EXPECT_EQ(config->num_key_value_heads, 1);
  EXPECT_EQ(config->head_dim, 8);
  EXPECT_EQ(config->vocab_size, 400);
  EXPECT_EQ(config->torch_dtype, DType::kF16);
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->num_files(), 2u);
  auto q = (*ckpt)->Info("model.layers.2.self_attn.q_proj.weight");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ((*q)->shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ((*q)->dtype, DType::kF16);
}

TEST(GenCheckpointCommandTest, HelpAndErrors) {
  EXPECT_EQ(Call(cli::GenCheckpointMain, {"gen-checkpoint", "--help"}), 0);
  EXPECT_EQ(Call(cli::GenCheckpointMain, {"gen-checkpoint", "--preset", "tiny"}), 1);  // No --out.
  const std::string out = testing::ScratchDir("x").string();
  EXPECT_EQ(Call(cli::GenCheckpointMain, {"gen-checkpoint", "--preset", "nope", "--out", out}), 1);
  EXPECT_EQ(Call(cli::GenCheckpointMain,
                 {"gen-checkpoint", "--preset", "tiny", "--out", out, "--dtype", "f64"}),
            1);
  EXPECT_EQ(Call(cli::GenCheckpointMain, {"gen-checkpoint", "--bogus"}), 1);
}

TEST(ConvertLlama2cCommandTest, HelpAndErrors) {
  EXPECT_EQ(Call(cli::ConvertLlama2cMain, {"convert-llama2c", "--help"}), 0);
  EXPECT_EQ(Call(cli::ConvertLlama2cMain, {"convert-llama2c", "--checkpoint", "x.bin"}), 1);
  const auto dir = testing::ScratchDir("x");
  EXPECT_EQ(Call(cli::ConvertLlama2cMain,
                 {"convert-llama2c", "--checkpoint", (dir / "none.bin").string(), "--tokenizer",
                  (dir / "tok.bin").string(), "--out", (dir / "out").string()}),
            1);
}

TEST(ConvertLlama2cCommandTest, ConvertsStories260K) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const auto src = testing::StoriesModelDir();
  const auto out = testing::ScratchDir("out");
  ASSERT_EQ(Call(cli::ConvertLlama2cMain,
                 {"convert-llama2c", "--checkpoint", (src / "stories260K.bin").string(),
                  "--tokenizer", (src / "tok512.bin").string(), "--out", out.string()}),
            0);
  auto ckpt = Checkpoint::Open(out);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_TRUE((*ckpt)->Has("lm_head.weight"));
}

}  // namespace
}  // namespace tessera
