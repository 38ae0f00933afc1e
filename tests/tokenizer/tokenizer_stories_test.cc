#include "common/tokenizer/tokenizer.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/tokenizer/token_bytes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/test_model.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;
using Json = nlohmann::json;

// stories260K: the real 512-piece SentencePiece BPE vocabulary with byte fallback.

class StoriesTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TESSERA_REQUIRE_STORIES_MODEL();
    auto t = Tokenizer::Load(testing::StoriesModelDir());
    ASSERT_TRUE(t.ok()) << t.status();
    tok_ = std::move(*t);
  }
  Json Expected() {
    auto text = ReadFileToString(testing::StoriesModelDir() / "expected_once_upon_a_time.json");
    EXPECT_TRUE(text.ok()) << text.status();
    Json j = Json::parse(text->begin(), text->end(), nullptr, false);
    EXPECT_FALSE(j.is_discarded());
    return j;
  }
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(StoriesTokenizerTest, EncodesReferencePrompt) {
  const Json expected = Expected();
  EXPECT_EQ(tok_->Encode(expected["prompt"].get<std::string>()),
            expected["prompt_ids"].get<std::vector<int32_t>>());
  EXPECT_THAT(tok_->Encode("Once upon a time"), ElementsAre(1, 403, 407, 261, 378));
}

TEST_F(StoriesTokenizerTest, DecodesReferenceGeneration) {
  const Json expected = Expected();
  std::vector<int32_t> ids = expected["prompt_ids"].get<std::vector<int32_t>>();
  for (int32_t id : expected["generated_ids"].get<std::vector<int32_t>>()) ids.push_back(id);
  EXPECT_EQ(tok_->Decode(ids), expected["generated_text"].get<std::string>());
}

TEST_F(StoriesTokenizerTest, Metadata) {
  EXPECT_EQ(tok_->vocab_size(), 512);
  EXPECT_EQ(tok_->bos_id(), 1);
  EXPECT_EQ(tok_->eos_id(), 2);
  EXPECT_TRUE(tok_->IsSpecial(0));
  EXPECT_TRUE(tok_->IsSpecial(1));
  EXPECT_TRUE(tok_->IsSpecial(2));
  EXPECT_FALSE(tok_->IsSpecial(3));
  EXPECT_FALSE(tok_->IsSpecial(403));
  EXPECT_EQ(tok_->PieceForId(403), "\xE2\x96\x81Once");
  EXPECT_EQ(tok_->PieceForId(1), "<s>");
  EXPECT_EQ(tok_->PieceForId(512), "");
  EXPECT_EQ(tok_->IdForPiece("<0x0A>"), 13);
  EXPECT_EQ(tok_->IdForPiece("no such piece"), -1);
}

// Expected ids derived from the vocabulary: "▁" is 410, byte b is piece 3 + b, and merges
// follow the ranks in tokenizer.json.
TEST_F(StoriesTokenizerTest, ExactEncodings) {
  EXPECT_THAT(tok_->Encode("the cat"), ElementsAre(1, 265, 280, 294));  // ▁the ▁c at
  EXPECT_THAT(tok_->Encode("a\nb"), ElementsAre(1, 261, 13, 430));     // ▁a <0x0A> b
  EXPECT_THAT(tok_->Encode("  two"), ElementsAre(1, 410, 410, 259, 424, 414));
  // "é" happens to be a piece; "🙂" (F0 9F 99 82) and "日" (E6 97 A5) are not.
  EXPECT_THAT(tok_->Encode("\xC3\xA9"), ElementsAre(1, 410, 485));
  EXPECT_THAT(tok_->Encode("Hi \xF0\x9F\x99\x82"),
              ElementsAre(1, 320, 417, 410, 3 + 0xF0, 3 + 0x9F, 3 + 0x99, 3 + 0x82));
  EXPECT_THAT(tok_->Encode("\xE6\x97\xA5"), ElementsAre(1, 410, 3 + 0xE6, 3 + 0x97, 3 + 0xA5));
  // Invalid UTF-8 bytes each go through byte fallback on their own.
  EXPECT_THAT(tok_->Encode("\xFF" "a\x80", /*add_special_tokens=*/false),
              ElementsAre(410, 3 + 0xFF, 412, 3 + 0x80));
}

TEST_F(StoriesTokenizerTest, EmptyTextIsJustBos) {
  EXPECT_THAT(tok_->Encode(""), ElementsAre(1));
  EXPECT_TRUE(tok_->Encode("", /*add_special_tokens=*/false).empty());
  EXPECT_EQ(tok_->Decode({1}), "");
  EXPECT_EQ(tok_->Decode({}), "");
}

TEST_F(StoriesTokenizerTest, AddSpecialTokensFalseOmitsBos) {
  EXPECT_THAT(tok_->Encode("Once upon a time", false), ElementsAre(403, 407, 261, 378));
}

TEST_F(StoriesTokenizerTest, SkipSpecialTokens) {
  const std::vector<int32_t> ids = {1, 403, 407, 2};
  EXPECT_EQ(tok_->Decode(ids), "Once upon");
  EXPECT_EQ(tok_->Decode(ids, /*skip_special_tokens=*/false), "<s> Once upon</s>");
  EXPECT_EQ(tok_->Decode({0, 403}), "Once");
  EXPECT_EQ(tok_->Decode({0, 403}, false), "<unk> Once");
}

TEST_F(StoriesTokenizerTest, LiteralSpecialTokensEncodeToTheirIds) {
  // As in Hugging Face, text after a special token gets its own "▁" prefix.
  EXPECT_THAT(tok_->Encode("<s>Once"), ElementsAre(1, 1, 403));
  EXPECT_THAT(tok_->Encode("Once</s>", false), ElementsAre(403, 2));
  EXPECT_THAT(tok_->Encode("<s", false), ::testing::Not(::testing::Contains(1)));
}

TEST_F(StoriesTokenizerTest, DecodesOutOfRangeIdsAsNothing) {
  EXPECT_EQ(tok_->Decode({403, -5, 512, 100000, 407}), "Once upon");
}

TEST_F(StoriesTokenizerTest, KeepsIncompleteUtf8AsRawBytes) {
  // The first two bytes of "🙂": a streaming caller sees the bytes so far, unchanged.
  EXPECT_EQ(tok_->Decode({3 + 0xF0, 3 + 0x9F}), "\xF0\x9F");
}

class StoriesRoundTripTest : public StoriesTokenizerTest,
                             public ::testing::WithParamInterface<std::string> {};

TEST_P(StoriesRoundTripTest, DecodeInvertsEncode) {
  const std::string& text = GetParam();
  EXPECT_EQ(tok_->Decode(tok_->Encode(text)), text);
  EXPECT_EQ(tok_->Decode(tok_->Encode(text, false)), text);
}

INSTANTIATE_TEST_SUITE_P(
    Strings, StoriesRoundTripTest,
    ::testing::Values("", "a", "Once upon a time", " leading space", "   three leading",
                      "trailing space ", "trailing spaces   ", "multiple   inner    spaces",
                      "new\nlines\n\nand\ttabs\r\n", "Punctuation: (yes!) \"quoted\", 'x'; a-b?",
                      "\xC3\xA9t\xC3\xA9", "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",
                      "smile \xF0\x9F\x99\x82 ok", "\x01\x02 control \x7F bytes",
                      "invalid \xFF\xFE utf-8 \x80 bytes \xE6\x97", " ", "\n"),
    [](const ::testing::TestParamInfo<std::string>& info) {
      return absl::StrCat("s", info.index);
    });

TEST_F(StoriesTokenizerTest, LongTextRoundTrips) {
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "Lily saw a big red ball in the park. ";
  const std::vector<int32_t> ids = tok_->Encode(text);
  EXPECT_LT(ids.size(), text.size() / 2);  // Merges happened.
  EXPECT_EQ(tok_->Decode(ids), text);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// What grammar masks match tokens against: mid-text bytes, word-boundary spaces kept,
// byte-fallback tokens as their raw byte, specials marked.
TEST(TokenByteStringsTest, SentencePieceTokensKeepTheirSpaces) {
  TESSERA_REQUIRE_STORIES_MODEL();
  auto t = Tokenizer::Load(testing::StoriesModelDir());
  ASSERT_TRUE(t.ok()) << t.status();
  const std::vector<std::string> bytes = TokenByteStrings(**t);
  ASSERT_EQ(static_cast<int32_t>(bytes.size()), (*t)->vocab_size());
  EXPECT_EQ(bytes[(*t)->IdForPiece("<0x0A>")], "\n");
  EXPECT_EQ(bytes[(*t)->IdForPiece("<0xC3>")], "\xC3");
  for (const std::string text : {"Once upon a time, there was a big dog.", "a b  c\nd"}) {
    std::string joined;
    for (int32_t id : (*t)->Encode(text, /*add_special_tokens=*/false)) joined += bytes[id];
    // The encoder's dummy prefix is the one space the decoder drops at the very start.
    EXPECT_EQ(joined, " " + std::string(text));
  }
  const std::vector<int32_t> specials = SpecialTokenIds(**t);
  EXPECT_NE(std::find(specials.begin(), specials.end(), (*t)->eos_id()), specials.end());
  EXPECT_NE(std::find(specials.begin(), specials.end(), (*t)->bos_id()), specials.end());
}

}  // namespace
}  // namespace tessera
