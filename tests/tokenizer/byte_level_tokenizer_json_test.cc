// The synthetic byte-level tokenizer of generated checkpoints (tools/checkpoint).
#include "tools/checkpoint/byte_level_tokenizer_json.h"

#include <set>
#include <string>

#include "common/file_util.h"
#include "common/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/test_model.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;
using Json = nlohmann::json;

std::unique_ptr<Tokenizer> Load(const std::string& name, const ByteLevelTokenizerFiles& files) {
  const auto dir = testing::ScratchDir(name);
  EXPECT_TRUE(WriteStringToFile(dir / "tokenizer.json", files.tokenizer_json).ok());
  EXPECT_TRUE(WriteStringToFile(dir / "tokenizer_config.json", files.tokenizer_config_json).ok());
  auto t = Tokenizer::Load(dir);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

TEST(SyntheticByteLevelTokenizerTest, Llama3FlavorHasTheRealSpecialIds) {
  auto files = SyntheticByteLevelTokenizer(ByteLevelFlavor::kLlama3, 128000);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->num_tokens, 128256);
  EXPECT_EQ(files->bos_token_id, 128000);
  EXPECT_THAT(files->eos_token_ids, ElementsAre(128001, 128008, 128009));
  auto t = Load("synthetic_llama3", *files);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->vocab_size(), 128256);
  EXPECT_EQ(t->IdForPiece("<|start_header_id|>"), 128006);
  EXPECT_EQ(t->IdForPiece("<|end_header_id|>"), 128007);
  EXPECT_EQ(t->IdForPiece("<|eom_id|>"), 128008);
  EXPECT_EQ(t->IdForPiece("<|eot_id|>"), 128009);
  EXPECT_EQ(t->IdForPiece("<|reserved_special_token_247|>"), 128255);
  EXPECT_EQ(t->eos_id(), 128009);  // tokenizer_config.json's eos_token, as the instruct models.
  const std::vector<int32_t> ids = t->Encode(" the people", true);
  EXPECT_EQ(ids.size(), 3u);  // BOS, " the", " people": common words are one token each.
  EXPECT_EQ(ids[0], 128000);
  EXPECT_EQ(t->Decode(t->Encode("Héllo, wörld! 🤖 12345", false)), "Héllo, wörld! 🤖 12345");
}

TEST(SyntheticByteLevelTokenizerTest, Qwen2FlavorAddsNoBos) {
  auto files = SyntheticByteLevelTokenizer(ByteLevelFlavor::kQwen2, 151643);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->bos_token_id, -1);
  EXPECT_THAT(files->eos_token_ids, ElementsAre(151645, 151643));
  EXPECT_EQ(files->num_tokens, 151665);
  auto t = Load("synthetic_qwen2", *files);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->IdForPiece("<|endoftext|>"), 151643);
  EXPECT_EQ(t->IdForPiece("<|im_start|>"), 151644);
  EXPECT_EQ(t->IdForPiece("<|im_end|>"), 151645);
  EXPECT_EQ(t->bos_id(), -1);
  EXPECT_THAT(t->Encode("<|im_start|>", true), ElementsAre(151644));
  EXPECT_FALSE(t->IsSpecial(t->IdForPiece("<tool_call>")));
}

// Qwen3's vocabulary: Qwen2.5's, then its think and tool-response tokens at 151665-151668,
// added but not special (they are text the model writes, and a detokenizer shows them).
TEST(SyntheticByteLevelTokenizerTest, Qwen3FlavorAddsThinkAndToolResponseTokens) {
  auto files = SyntheticByteLevelTokenizer(ByteLevelFlavor::kQwen3, 151643);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->num_tokens, 151669);
  EXPECT_EQ(files->bos_token_id, -1);
  EXPECT_THAT(files->eos_token_ids, ElementsAre(151645, 151643));
  auto t = Load("synthetic_qwen3", *files);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->IdForPiece("<|im_end|>"), 151645);
  EXPECT_EQ(t->IdForPiece("<tool_response>"), 151665);
  EXPECT_EQ(t->IdForPiece("</tool_response>"), 151666);
  EXPECT_EQ(t->IdForPiece("<think>"), 151667);
  EXPECT_EQ(t->IdForPiece("</think>"), 151668);
  EXPECT_FALSE(t->IsSpecial(151667));
  EXPECT_THAT(t->Encode("<think>", false), ElementsAre(151667));
}

TEST(SyntheticByteLevelTokenizerTest, DeterministicWithUniquePieces) {
  auto a = SyntheticByteLevelTokenizer(ByteLevelFlavor::kLlama3, 3000);
  auto b = SyntheticByteLevelTokenizer(ByteLevelFlavor::kLlama3, 3000);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->tokenizer_json, b->tokenizer_json);
  const Json j = Json::parse(a->tokenizer_json);
  EXPECT_EQ(j["model"]["vocab"].size(), 3000u);  // An object: a repeated piece would collapse.
  EXPECT_EQ(j["model"]["merges"].size(), 3000u - 256u);
  std::set<std::string> merged;
  for (const Json& m : j["model"]["merges"]) {
    EXPECT_TRUE(merged.insert(m[0].get<std::string>() + m[1].get<std::string>()).second);
  }
  EXPECT_EQ(j["added_tokens"][0]["id"], 3000);
}

TEST(SyntheticByteLevelTokenizerTest, RejectsTooFewRegularTokens) {
  EXPECT_FALSE(SyntheticByteLevelTokenizer(ByteLevelFlavor::kLlama3, 255).ok());
  auto minimal = SyntheticByteLevelTokenizer(ByteLevelFlavor::kQwen2, 256);
  ASSERT_TRUE(minimal.ok());
  auto t = Load("synthetic_minimal", *minimal);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Encode("ab", false).size(), 2u);  // Bytes only.
}

}  // namespace
}  // namespace tessera
