// Detokenization for streaming: deltas add up to the text, stop strings never leak, and
// whatever the tokens spell, the text is valid UTF-8.
#include "coordinator/engine/output_processor.h"

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/support/test_model.h"

namespace tessera {
namespace {

// Each id decodes to a fixed byte string; Decode concatenates (no leading-space rule).
class FakeTokenizer final : public Tokenizer {
 public:
  explicit FakeTokenizer(std::map<int32_t, std::string> pieces) : pieces_(std::move(pieces)) {}
  std::vector<int32_t> Encode(absl::string_view, bool) const override { return {}; }
  std::string Decode(const std::vector<int32_t>& ids, bool) const override {
    std::string out;
    for (int32_t id : ids) out += pieces_.at(id);
    return out;
  }
  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }
  int32_t bos_id() const override { return -1; }
  int32_t eos_id() const override { return -1; }
  bool IsSpecial(int32_t) const override { return false; }

 private:
  std::map<int32_t, std::string> pieces_;
};

const FakeTokenizer& Tok() {
  static const auto* tok = new FakeTokenizer({{0, "P"},
                                              {1, "Hello"},
                                              {2, " wor"},
                                              {3, "ld"},
                                              {4, "\xE6"},      // First byte of 日 (E6 97 A5).
                                              {5, "\x97\xA5"},  // Its last two bytes.
                                              {6, "\xFF"},      // Never valid in UTF-8.
                                              {7, "EN"},
                                              {8, "D!"}});
  return *tok;
}

std::string Feed(OutputProcessor& p, const std::vector<int32_t>& ids) {
  std::string text;
  for (int32_t id : ids) text += p.Append(id);
  return text + p.Flush();
}

TEST(OutputProcessorTest, DeltasConcatenateToTheText) {
  OutputProcessor p(&Tok(), {0}, {});
  EXPECT_EQ(Feed(p, {1, 2, 3}), "Hello world");
}

TEST(OutputProcessorTest, HoldsBackASplitCharacterUntilComplete) {
  OutputProcessor p(&Tok(), {0}, {});
  EXPECT_EQ(p.Append(4), "");
  EXPECT_EQ(p.Append(5), "\xE6\x97\xA5");
}

TEST(OutputProcessorTest, InvalidBytesBecomeReplacementCharacters) {
  OutputProcessor p(&Tok(), {0}, {});
  const std::string text = Feed(p, {1, 6, 5, 4});
  // 0xFF and the stray continuation bytes are replaced; the unfinished 0xE6 at the end is
  // dropped at the end of the request.
  EXPECT_EQ(text, "Hello\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(CompleteUtf8Length(text), text.size());
}

TEST(OutputProcessorTest, StopStringEndsTheTextBeforeIt) {
  OutputProcessor p(&Tok(), {0}, {"END"});
  std::string text;
  for (int32_t id : {1, 7}) text += p.Append(id);
  EXPECT_FALSE(p.stopped());
  EXPECT_EQ(text, "Hello");  // "EN" is held back: it may start "END".
  text += p.Append(8);
  EXPECT_TRUE(p.stopped());
  EXPECT_EQ(text, "Hello");
  EXPECT_EQ(p.Flush(), "");
}

TEST(OutputProcessorTest, HeldBackTextIsReleasedWhenNoStopFollows) {
  OutputProcessor p(&Tok(), {0}, {"END"});
  EXPECT_EQ(Feed(p, {1, 7}), "HelloEN");
}

TEST(SanitizeUtf8Test, KeepsValidTextAndReplacesInvalidSequences) {
  EXPECT_EQ(SanitizeUtf8("plain é 日 🙂"), "plain é 日 🙂");
  EXPECT_EQ(SanitizeUtf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");   // Overlong '/'.
  EXPECT_EQ(SanitizeUtf8("\xED\xA0\x80x"), "\xEF\xBF\xBDx");          // A surrogate.
  EXPECT_EQ(SanitizeUtf8("a\xF0\x9F"), "a\xF0\x9F");                  // Unfinished at the end.
}

// A complete sequence that is not a character stays invalid at the end of the text too:
// no later byte can make it valid, so it must not be held back as "unfinished" (it was,
// and went out in a stream delta, which protobuf then refused to serialise).
TEST(SanitizeUtf8Test, CompleteInvalidSequenceAtTheEndIsReplaced) {
  EXPECT_EQ(SanitizeUtf8("a\xED\xA0\x80"), "a\xEF\xBF\xBD");   // A surrogate.
  EXPECT_EQ(SanitizeUtf8("a\xE0\x80\x80"), "a\xEF\xBF\xBD");   // Overlong NUL.
  EXPECT_EQ(SanitizeUtf8("a\xF4\x90\x80\x80"), "a\xEF\xBF\xBD");  // Past U+10FFFF.
}

// Strict UTF-8: every sequence complete, shortest form, no surrogates, at most U+10FFFF
// (what protobuf requires of a string field before it serialises a response).
bool IsValidUtf8(const std::string& s) {
  return SanitizeUtf8(s) == s && CompleteUtf8Length(s) == s.size();
}

TEST(OutputProcessorTest, SurrogateBytesAtTheEndNeverLeaveAsText) {
  static const auto* tok = new FakeTokenizer({{0, "P"}, {1, "\xED"}, {2, "\xA0"}, {3, "\x80"},
                                              {4, "x"}});
  OutputProcessor p(tok, {0}, {});
  for (int32_t id : {1, 2, 3, 4, 1, 2, 3}) EXPECT_TRUE(IsValidUtf8(p.Append(id))) << id;
  EXPECT_TRUE(IsValidUtf8(p.Flush()));
}

// stories260K's SentencePiece vocabulary has byte-fallback pieces, and a decoder that
// drops a leading space, so decoding is not a concatenation. Random prompts and outputs
// over the whole vocabulary (what a load generator and a random-weight model produce) must
// stream as valid UTF-8 every time: one invalid delta kills the stream.
TEST(OutputProcessorTest, RandomTokensOfARealVocabularyStreamValidUtf8) {
  TESSERA_REQUIRE_STORIES_MODEL();
  auto tokenizer = Tokenizer::Load(testing::StoriesModelDir());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> id(0, (*tokenizer)->vocab_size() - 1);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<int32_t> prompt(8);
    for (auto& t : prompt) t = id(rng);
    OutputProcessor p(tokenizer->get(), prompt, trial % 2 ? std::vector<std::string>{"ab"}
                                                          : std::vector<std::string>{});
    for (int i = 0; i < 32; ++i) {
      const std::string delta = p.Append(id(rng));
      ASSERT_TRUE(IsValidUtf8(delta)) << "trial " << trial << " token " << i;
    }
    ASSERT_TRUE(IsValidUtf8(p.Flush())) << "trial " << trial;
  }
}

}  // namespace
}  // namespace tessera
