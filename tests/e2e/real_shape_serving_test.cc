// A Llama 3.1 8B-shaped checkpoint (real hidden size, heads, 128k byte-level vocabulary,
// llama3 RoPE scaling; 2 of its 32 layers, random weights) served at tp 2: it loads,
// tokenizes with the byte-level tokenizer, generates, and every streamed text delta is
// valid UTF-8 although random weights pick byte tokens that split characters.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "common/tokenizer/unicode_util.h"
#include "gtest/gtest.h"
#include "tests/e2e/serving_util.h"
#include "tests/support/cluster.h"
#include "tests/support/test_model.h"
#include "tools/checkpoint/generate.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

// True when every byte of `text` belongs to a well-formed UTF-8 sequence.
bool IsValidUtf8(absl::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8CharLength(text, i);
    if (n == 1 && static_cast<unsigned char>(text[i]) >= 0x80) return false;
    i += n;
  }
  return true;
}

struct RemoveOnExit {
  std::filesystem::path dir;
  ~RemoveOnExit() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

TEST(RealShapeServingTest, Llama31_8bShapedTwoLayersServesAtTp2WithValidUtf8Streams) {
  const auto scratch = testing::ScratchDir("llama3.1-8b");
  RemoveOnExit cleanup{scratch};
  const auto space = std::filesystem::space(scratch);
  if (space.available < (8ull << 30)) {
    GTEST_SKIP() << "needs 8 GiB free under " << scratch.string() << " for a 3 GB checkpoint, has "
                 << (space.available >> 20) << " MiB";
  }
  auto config = PresetConfig("llama3.1-8b", /*num_layers=*/2);
  ASSERT_TRUE(config.ok()) << config.status();
  GenerateOptions gen;
  gen.out_dir = scratch / "model";
  gen.dtype = DType::kBF16;
  gen.seed = 11;
  auto t = Clock::now();
  ASSERT_TRUE(GenerateRandomCheckpoint(*config, gen).ok());
  std::printf("generated llama3.1-8b (2 layers) in %.1f s\n",
              std::chrono::duration<double>(Clock::now() - t).count());

  testing::ClusterOptions options;
  options.model_dir = gen.out_dir;
  options.log_dir = scratch / "logs";
  options.tp = 2;
  options.kv_memory_mb = 64;
  options.max_num_seqs = 4;
  options.coordinator_flags = {"--max-model-len", "2048"};
  auto cluster = testing::Cluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status().message();

  const std::string prompt = "The café’s menu: 日本語, emoji 👩‍💻 and numbers 12345.";
  v1::TokenizeRequest tokenize;
  tokenize.set_text(prompt);
  tokenize.set_add_special_tokens(true);  // As Generate tokenizes text.
  v1::TokenizeResponse tokens;
  grpc::ClientContext tctx;
  ASSERT_TRUE((*cluster)->api().Tokenize(&tctx, tokenize, &tokens).ok());
  ASSERT_GT(tokens.token_ids_size(), 1);
  EXPECT_EQ(tokens.token_ids(0), 128000) << "Llama 3 prompts start with <|begin_of_text|>";

  v1::GenerateRequest request = testing::GreedyText(prompt, 24);
  const auto stream = testing::RunStream((*cluster)->api(), request, std::chrono::seconds(300));
  ASSERT_TRUE(stream.status.ok()) << stream.status.error_message() << "\n" << (*cluster)->Logs();
  EXPECT_EQ(stream.ids.size(), 24u);
  EXPECT_EQ(stream.prompt_ids,
            std::vector<int32_t>(tokens.token_ids().begin(), tokens.token_ids().end()));
  EXPECT_TRUE(IsValidUtf8(stream.text)) << stream.text;

  // The stream is the unary answer, delivered in pieces.
  const auto unary = testing::RunUnary((*cluster)->api(), request, std::chrono::seconds(300));
  ASSERT_TRUE(unary.status.ok()) << unary.status.error_message();
  EXPECT_EQ(unary.ids(), stream.ids);
  EXPECT_EQ(unary.response.text(), stream.text);
}

}  // namespace
}  // namespace tessera
