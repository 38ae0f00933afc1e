// Byte-level BPE pieces: the GPT-2 alphabet, the PCRE2 regex, Split behaviors, and a tiny
// byte-level tokenizer.json exercising ignore_merges, added tokens, the post-processor,
// decoding, streaming and malformed files.
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/tokenizer/byte_level_alphabet.h"
#include "common/tokenizer/token_bytes.h"
#include "common/tokenizer/pre_tokenizer.h"
#include "common/tokenizer/regex.h"
#include "common/tokenizer/stream_decoder.h"
#include "common/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/test_model.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;

constexpr char kLlama3Pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

std::string Spell(absl::string_view raw) {
  std::string out;
  ByteLevelAlphabet::Get().Encode(raw, &out);
  return out;
}

TEST(ByteLevelAlphabetTest, MatchesGpt2Table) {
  const ByteLevelAlphabet& a = ByteLevelAlphabet::Get();
  EXPECT_EQ(a.CharForByte('a'), "a");
  EXPECT_EQ(a.CharForByte('!'), "!");
  EXPECT_EQ(a.CodePointForByte(0x00), 0x100u);
  EXPECT_EQ(a.CharForByte(' '), "\xC4\xA0");   // "Ġ" U+0120
  EXPECT_EQ(a.CharForByte('\n'), "\xC4\x8A");  // "Ċ" U+010A
  EXPECT_EQ(a.CodePointForByte(0x7F), 0x121u);
  EXPECT_EQ(a.CodePointForByte(0xAD), 0x143u);  // The last shifted byte.
  EXPECT_EQ(a.CodePointForByte(0xE9), 0xE9u);   // Latin-1 "é" stands for itself.
  std::set<uint32_t> seen;
  std::string all;
  for (int b = 0; b < 256; ++b) {
    seen.insert(a.CodePointForByte(b));
    all.push_back(static_cast<char>(b));
  }
  EXPECT_EQ(seen.size(), 256u);
  std::string decoded;
  ASSERT_TRUE(a.Decode(Spell(all), &decoded));
  EXPECT_EQ(decoded, all);
  EXPECT_FALSE(a.Decode("\xE2\x96\x81", &decoded));  // "▁" is not in the alphabet.
}

std::vector<std::string> Matches(const Regex& regex, absl::string_view text) {
  std::vector<std::string> out;
  EXPECT_TRUE(regex.ForEachMatch(text, [&](size_t s, size_t e) {
    out.emplace_back(text.substr(s, e - s));
  }).ok());
  return out;
}

TEST(RegexTest, Llama3PatternNeedsLookahead) {
  auto regex = Regex::Compile(kLlama3Pattern);
  ASSERT_TRUE(regex.ok()) << regex.status();
  // `\s+(?!\S)` leaves the last space to the next word.
  EXPECT_THAT(Matches(*regex, "a   b"), ElementsAre("a", "  ", " b"));
  EXPECT_THAT(Matches(*regex, "I'LL 12345"), ElementsAre("I", "'LL", " ", "123", "45"));
  EXPECT_THAT(Matches(*regex, "x\r\n\r\ny"), ElementsAre("x", "\r\n\r\n", "y"));
  // U+0085 is White_Space in Rust and Oniguruma, though not in PCRE2's \s.
  EXPECT_THAT(Matches(*regex, "x\xC2\x85 y"), ElementsAre("x", "\xC2\x85", " y"));
}

TEST(RegexTest, WidensWhitespaceClassesOnly) {
  EXPECT_EQ(WidenWhitespaceClasses("\\s+(?!\\S)"), "[\\s\\x{85}]+(?![^\\s\\x{85}])");
  EXPECT_EQ(WidenWhitespaceClasses("[^\\s\\p{L}]"), "[^\\s\\x{85}\\p{L}]");
  EXPECT_EQ(WidenWhitespaceClasses("\\\\s"), "\\\\s");  // An escaped backslash, then "s".
  EXPECT_EQ(WidenWhitespaceClasses("[]\\s]"), "[]\\s\\x{85}]");
}

TEST(RegexTest, InvalidUtf8AndBadPatterns) {
  auto regex = Regex::Compile("\\p{L}+");
  ASSERT_TRUE(regex.ok());
  EXPECT_THAT(Matches(*regex, "ab\xFF\xFE" "cd"), ElementsAre("ab", "cd"));
  auto bad = Regex::Compile("(unclosed");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("(unclosed"));
}

std::vector<std::string> Pieces(absl::string_view text, SplitBehavior behavior, bool invert) {
  auto regex = Regex::Compile("-");
  std::vector<std::pair<size_t, size_t>> matches;
  EXPECT_TRUE(regex->ForEachMatch(text, [&](size_t s, size_t e) { matches.emplace_back(s, e); }).ok());
  std::vector<std::string> out;
  for (const auto& [s, e] : SplitByMatches(text.size(), matches, behavior, invert)) {
    out.emplace_back(text.substr(s, e - s));
  }
  return out;
}

TEST(SplitBehaviorTest, MatchesHuggingFaceDocumentation) {
  const std::string text = "the-final--countdown";
  EXPECT_THAT(Pieces(text, SplitBehavior::kRemoved, false), ElementsAre("the", "final", "countdown"));
  EXPECT_THAT(Pieces(text, SplitBehavior::kIsolated, false),
              ElementsAre("the", "-", "final", "-", "-", "countdown"));
  EXPECT_THAT(Pieces(text, SplitBehavior::kMergedWithPrevious, false),
              ElementsAre("the-", "final-", "-", "countdown"));
  EXPECT_THAT(Pieces(text, SplitBehavior::kMergedWithNext, false),
              ElementsAre("the", "-final", "-", "-countdown"));
  EXPECT_THAT(Pieces(text, SplitBehavior::kContiguous, false),
              ElementsAre("the", "-", "final", "--", "countdown"));
  // Inverted: the words are the matches, so removing delimiters keeps only the dashes.
  EXPECT_THAT(Pieces(text, SplitBehavior::kRemoved, true), ElementsAre("-", "-", "-"));
}

// A byte-level tokenizer.json: ids 0..255 are the bytes, then one id per merge.
struct TinyVocab {
  Json vocab = Json::object();
  Json merges = Json::array();
  int next_id = 256;
  TinyVocab() {
    for (int b = 0; b < 256; ++b) vocab[std::string(ByteLevelAlphabet::Get().CharForByte(b))] = b;
  }
  void Merge(absl::string_view left, absl::string_view right) {
    merges.push_back(Json::array({Spell(left), Spell(right)}));
    vocab[Spell(absl::StrCat(left, right))] = next_id++;
  }
  void Piece(absl::string_view raw) { vocab[Spell(raw)] = next_id++; }
};

Json TinyByteLevel(const TinyVocab& v, bool ignore_merges) {
  return Json{
      {"version", "1.0"},
      {"added_tokens",
       Json::array({{{"id", 1000}, {"content", "<|bos|>"}, {"special", true}},
                    {{"id", 1001}, {"content", "<|end|>"}, {"special", true}},
                    {{"id", 1002}, {"content", "<tool>"}, {"special", false}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         Json::array({{{"type", "Split"},
                       {"pattern", {{"Regex", kLlama3Pattern}}},
                       {"behavior", "Isolated"},
                       {"invert", false}},
                      {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
      {"post_processor",
       {{"type", "Sequence"},
        {"processors",
         Json::array({{{"type", "ByteLevel"}},
                      {{"type", "TemplateProcessing"},
                       {"single", Json::array({{{"SpecialToken", {{"id", "<|bos|>"}, {"type_id", 0}}}},
                                               {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                       {"special_tokens",
                        {{"<|bos|>", {{"id", "<|bos|>"}, {"ids", {1000}}, {"tokens", {"<|bos|>"}}}}}}}})}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"ignore_merges", ignore_merges},
        {"vocab", v.vocab},
        {"merges", v.merges}}}};
}

std::unique_ptr<Tokenizer> Load(const std::string& name, const Json& j) {
  const auto dir = testing::ScratchDir(name);
  EXPECT_TRUE(WriteStringToFile(dir / "tokenizer.json", j.dump()).ok());
  auto t = Tokenizer::Load(dir);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

TinyVocab WordsVocab() {
  TinyVocab v;
  v.Merge(" ", "t");    // 256
  v.Merge("h", "e");    // 257
  v.Merge(" t", "he");  // 258 " the"
  v.Piece(" cat");      // 259: in the vocabulary, but no merges make it.
  return v;
}

TEST(ByteLevelTokenizerTest, MergesAndIgnoreMerges) {
  auto merging = Load("bl_merges", TinyByteLevel(WordsVocab(), /*ignore_merges=*/false));
  ASSERT_NE(merging, nullptr);
  // " cat" has no merges: byte by byte.
  EXPECT_THAT(merging->Encode("the cat", false), ElementsAre('t', 257, ' ', 'c', 'a', 't'));
  EXPECT_THAT(merging->Encode(" the", false), ElementsAre(258));
  auto whole = Load("bl_ignore", TinyByteLevel(WordsVocab(), /*ignore_merges=*/true));
  ASSERT_NE(whole, nullptr);
  EXPECT_THAT(whole->Encode("the cat", false), ElementsAre('t', 257, 259));
  EXPECT_EQ(whole->PieceForId(258), "\xC4\xA0the");  // "Ġthe"
  EXPECT_EQ(whole->IdForPiece("\xC4\xA0" "cat"), 259);
}

TEST(ByteLevelTokenizerTest, TokenByteStringsJoinToTheText) {
  auto t = Load("bl_bytes", TinyByteLevel(WordsVocab(), /*ignore_merges=*/false));
  ASSERT_NE(t, nullptr);
  const std::vector<std::string> bytes = TokenByteStrings(*t);
  EXPECT_EQ(bytes[258], " the");
  const std::string text = "the cat \xC3\xA9\n";
  std::string joined;
  for (int32_t id : t->Encode(text, false)) joined += bytes[id];
  EXPECT_EQ(joined, text);
}

TEST(ByteLevelTokenizerTest, AddedTokensAndPostProcessor) {
  auto t = Load("bl_added", TinyByteLevel(WordsVocab(), true));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->bos_id(), 1000);
  EXPECT_THAT(t->Encode("he<|end|>", true), ElementsAre(1000, 257, 1001));
  EXPECT_THAT(t->Encode("he<|end|>", false), ElementsAre(257, 1001));
  // Plain: special text is ordinary text; non-special added tokens still match.
  const std::vector<int32_t> plain =
      t->Encode("<|end|><tool>", Tokenizer::EncodeOptions{.add_special_tokens = false,
                                                           .parse_special_tokens = false,
                                                           .plain_ranges = {}});
  ASSERT_FALSE(plain.empty());
  EXPECT_EQ(plain.back(), 1002);
  for (size_t i = 0; i + 1 < plain.size(); ++i) EXPECT_LT(plain[i], 256);
  EXPECT_EQ(t->Decode(plain, false), "<|end|><tool>");
  // Text that looks like a special token but is not one stays text.
  for (int32_t id : t->Encode("<|begin_of_text|>", false)) EXPECT_LT(id, 256);
  EXPECT_TRUE(t->IsSpecial(1001));
  EXPECT_FALSE(t->IsSpecial(1002));
  EXPECT_EQ(t->Decode({1000, 257, 1001}, /*skip_special_tokens=*/true), "he");
  EXPECT_EQ(t->Decode({1000, 257, 1001}, false), "<|bos|>he<|end|>");
  EXPECT_EQ(t->vocab_size(), 1003);
}

TEST(ByteLevelTokenizerTest, RoundTripsBytesAndStreamsWholeCharacters) {
  auto t = Load("bl_stream", TinyByteLevel(WordsVocab(), true));
  ASSERT_NE(t, nullptr);
  const std::string text = "caf\xC3\xA9 \xF0\x9F\xA4\x96 the\r\n\t end";  // "café 🤖 the..."
  const std::vector<int32_t> ids = t->Encode(text, false);
  EXPECT_EQ(t->Decode(ids, false), text);
  StreamDecoder stream(t.get());
  std::string joined;
  std::vector<std::string> deltas;
  for (int32_t id : ids) {
    std::string delta = stream.Append(id);
    EXPECT_EQ(ReplaceInvalidUtf8(delta), delta) << "delta is not valid UTF-8";
    if (!delta.empty()) deltas.push_back(delta);
    joined += delta;
  }
  joined += stream.Finish();
  EXPECT_EQ(joined, text);
  // The robot emoji is four byte tokens; it comes out once, whole.
  EXPECT_THAT(deltas, ::testing::Contains("\xF0\x9F\xA4\x96"));
  // A character that never completes is flushed as U+FFFD at the end.
  StreamDecoder cut(t.get());
  EXPECT_EQ(cut.Append(0xF0), "");
  EXPECT_EQ(cut.Append(0x9F), "");
  EXPECT_EQ(cut.Finish(), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(ByteLevelTokenizerTest, NfcNormalizerComposesBeforeSplitting) {
  Json j = TinyByteLevel(WordsVocab(), true);
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", Json::array({{{"type", "NFC"}}})}};
  auto t = Load("bl_nfc", j);
  ASSERT_NE(t, nullptr);
  const std::string composed = "caf\xC3\xA9";     // "café", U+00E9
  const std::string decomposed = "cafe\xCC\x81";  // "cafe" + U+0301
  EXPECT_EQ(t->Encode(decomposed, false), t->Encode(composed, false));
  EXPECT_EQ(t->Decode(t->Encode(decomposed, false), false), composed);
  // Added tokens are matched before normalizing; invalid UTF-8 passes through.
  EXPECT_THAT(t->Encode("<|end|>", false), ElementsAre(1001));
  EXPECT_EQ(t->Decode(t->Encode("a\xFF", false), false), "a\xFF");
}

struct Malformed {
  const char* name;
  Json json;
  const char* expected;  // Substring of the error besides the file name.
};

Json WithField(Json j, const std::vector<std::string>& path, Json value) {
  Json* at = &j;
  const auto step = [](Json* node, const std::string& key) {
    return node->is_array() ? &(*node)[std::stoul(key)] : &(*node)[key];
  };
  for (size_t i = 0; i + 1 < path.size(); ++i) at = step(at, path[i]);
  *step(at, path.back()) = std::move(value);
  return j;
}

class ByteLevelMalformedTest : public ::testing::TestWithParam<Malformed> {};

TEST_P(ByteLevelMalformedTest, NamesFileAndField) {
  const auto dir = testing::ScratchDir(GetParam().name);
  ASSERT_TRUE(WriteStringToFile(dir / "tokenizer.json", GetParam().json.dump()).ok());
  auto t = Tokenizer::Load(dir);
  ASSERT_FALSE(t.ok());
  const std::string message(t.status().message());
  EXPECT_THAT(message, HasSubstr((dir / "tokenizer.json").string()));
  EXPECT_THAT(message, HasSubstr(GetParam().expected));
}

Json Base() { return TinyByteLevel(WordsVocab(), true); }
Json SplitStep(Json pattern, const char* behavior) {
  Json split{{"type", "Split"}, {"behavior", behavior}};
  if (!pattern.is_null()) split["pattern"] = std::move(pattern);
  return Json{{"type", "Sequence"},
              {"pretokenizers", Json::array({split, {{"type", "ByteLevel"}, {"use_regex", false}}})}};
}

INSTANTIATE_TEST_SUITE_P(
    All, ByteLevelMalformedTest,
    ::testing::Values(
        Malformed{"no_pattern", WithField(Base(), {"pre_tokenizer"}, SplitStep(nullptr, "Isolated")),
                  "pre_tokenizer.pattern"},
        Malformed{"bad_regex",
                  WithField(Base(), {"pre_tokenizer"}, SplitStep({{"Regex", "(?<"}}, "Isolated")),
                  "pre_tokenizer.pattern"},
        Malformed{"bad_behavior",
                  WithField(Base(), {"pre_tokenizer"}, SplitStep({{"String", " "}}, "Sideways")),
                  "Sideways"},
        Malformed{"unsupported_pre_tokenizer",
                  WithField(Base(), {"pre_tokenizer", "pretokenizers", "0"}, {{"type", "Punctuation"}}),
                  "Punctuation"},
        Malformed{"split_after_byte_level",
                  WithField(Base(), {"pre_tokenizer", "pretokenizers"},
                            Json::array({{{"type", "ByteLevel"}},
                                         {{"type", "Split"},
                                          {"pattern", {{"String", " "}}},
                                          {"behavior", "Isolated"}}})),
                  "after ByteLevel"},
        Malformed{"decoder", WithField(Base(), {"decoder"}, {{"type", "Metaspace"}}), "field \"decoder\""},
        Malformed{"normalizer", WithField(Base(), {"normalizer"}, {{"type", "Lowercase"}}),
                  "field \"normalizer\""},
        Malformed{"merge_unknown_piece",
                  WithField(Base(), {"model", "merges"}, Json::array({Json::array({"zz", "q"})})),
                  "model.merges"},
        Malformed{"ignore_merges_not_bool", WithField(Base(), {"model", "ignore_merges"}, "yes"),
                  "model.ignore_merges"},
        Malformed{"bos_outside_vocab",
                  WithField(Base(), {"post_processor", "processors", "1", "special_tokens", "<|bos|>", "ids"},
                            Json::array({5000})),
                  "5000"},
        Malformed{"byte_fallback", WithField(Base(), {"model", "byte_fallback"}, true),
                  "model.byte_fallback"}),
    [](const ::testing::TestParamInfo<Malformed>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tessera
