// The coordinator's OutputProcessor streaming byte-level tokens: an emoji or a CJK
// character is several tokens, and no delta may end inside it.
#include <string>
#include <vector>

#include "common/file_util.h"
#include "common/tokenizer/stream_decoder.h"
#include "common/tokenizer/tokenizer.h"
#include "coordinator/engine/output_processor.h"
#include "gtest/gtest.h"
#include "tests/support/test_model.h"
#include "tools/checkpoint/byte_level_tokenizer_json.h"

namespace tessera {
namespace {

class CoordinatorStreamingTest : public ::testing::TestWithParam<ByteLevelFlavor> {};

TEST_P(CoordinatorStreamingTest, DeltasAreWholeCharacters) {
  auto files = SyntheticByteLevelTokenizer(GetParam(), 4000);
  ASSERT_TRUE(files.ok()) << files.status();
  const auto dir = testing::ScratchDir("coordinator_streaming");
  ASSERT_TRUE(WriteStringToFile(dir / "tokenizer.json", files->tokenizer_json).ok());
  ASSERT_TRUE(WriteStringToFile(dir / "tokenizer_config.json", files->tokenizer_config_json).ok());
  auto tokenizer = Tokenizer::Load(dir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();

  const std::string prompt = "Say hello in three languages:";
  const std::string output =
      " Hello! \xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x81 \xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82 "
      "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 done";  // 你好！ Привет 👨‍👩‍👧
  const std::vector<int32_t> prompt_ids = (*tokenizer)->Encode(prompt, true);
  const std::vector<int32_t> output_ids = (*tokenizer)->Encode(output, false);
  ASSERT_GT(output_ids.size(), 20u);  // Multi-byte characters span several tokens.

  OutputProcessor processor(tokenizer->get(), prompt_ids, {});
  std::string streamed;
  for (int32_t id : output_ids) {
    const std::string delta = processor.Append(id);
    EXPECT_EQ(ReplaceInvalidUtf8(delta), delta) << "delta after id " << id << " is not UTF-8";
    EXPECT_FALSE(EndsInsideCharacter(delta));
    streamed += delta;
  }
  streamed += processor.Flush();
  EXPECT_EQ(streamed, output);
}

INSTANTIATE_TEST_SUITE_P(Flavors, CoordinatorStreamingTest,
                         ::testing::Values(ByteLevelFlavor::kLlama3, ByteLevelFlavor::kQwen2));

}  // namespace
}  // namespace tessera
