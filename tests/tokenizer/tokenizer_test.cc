#include "common/tokenizer/tokenizer.h"

#include <string>
#include <vector>

#include "common/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/test_model.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;

// Synthetic tokenizer.json files.

Json TinyBpe(Json merges) {
  Json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}, {"\xE2\x96\x81", 3}, {"a", 4},
                {"b", 5},     {"c", 6},   {"ab", 7},   {"bc", 8},           {"\xE2\x96\x81" "a", 9},
                {"<0x41>", 10}};
  return Json{
      {"version", "1.0"},
      {"added_tokens",
       Json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                    {{"id", 1}, {"content", "<s>"}, {"special", true}},
                    {{"id", 2}, {"content", "</s>"}, {"special", true}}})},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         Json::array({{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                      {{"type", "Replace"},
                       {"pattern", {{"String", " "}}},
                       {"content", "\xE2\x96\x81"}}})}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", Json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         Json::array({{{"type", "Replace"},
                       {"pattern", {{"String", "\xE2\x96\x81"}}},
                       {"content", " "}},
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}},
                      {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"vocab", vocab},
        {"merges", merges}}}};
}

std::filesystem::path WriteTokenizer(const std::string& name, const std::string& tokenizer_json,
                                     const std::string* config_json = nullptr) {
  const std::filesystem::path dir = testing::ScratchDir(name);
  EXPECT_TRUE(WriteStringToFile(dir / "tokenizer.json", tokenizer_json).ok());
  if (config_json != nullptr) {
    EXPECT_TRUE(WriteStringToFile(dir / "tokenizer_config.json", *config_json).ok());
  }
  return dir;
}

std::unique_ptr<Tokenizer> LoadJson(const std::string& name, const Json& j,
                                    const std::string* config = nullptr) {
  auto t = Tokenizer::Load(WriteTokenizer(name, j.dump(), config));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

TEST(SyntheticTokenizerTest, LowestRankMergeWins) {
  // "abc": with "b c" ranked first, b+c merges before a+b can.
  auto bc_first = LoadJson("bc", TinyBpe(Json::array({"b c", "a b"})));
  ASSERT_NE(bc_first, nullptr);
  EXPECT_THAT(bc_first->Encode("abc", false), ElementsAre(3, 4, 8));
  auto ab_first = LoadJson("ab", TinyBpe(Json::array({"a b", "b c"})));
  ASSERT_NE(ab_first, nullptr);
  EXPECT_THAT(ab_first->Encode("abc", false), ElementsAre(3, 7, 6));
}

TEST(SyntheticTokenizerTest, MergesMayBePairs) {
  auto t = LoadJson("pairs", TinyBpe(Json::array({Json::array({"b", "c"}),
                                                  Json::array({"\xE2\x96\x81", "a"})})));
  ASSERT_NE(t, nullptr);
  EXPECT_THAT(t->Encode("abc"), ElementsAre(1, 9, 8));
  EXPECT_EQ(t->Decode(t->Encode("abc")), "abc");
}

TEST(SyntheticTokenizerTest, UnknownCharactersFallBackToBytesThenUnk) {
  auto t = LoadJson("fallback", TinyBpe(Json::array()));
  ASSERT_NE(t, nullptr);
  // "A" has a byte piece; "xy" has neither piece nor byte pieces: one fused <unk>.
  EXPECT_THAT(t->Encode("AxyA", false), ElementsAre(3, 10, 0, 10));
  EXPECT_EQ(t->Decode({3, 10, 0, 10}), "AA");
  EXPECT_EQ(t->Decode({3, 10, 0, 10}, false), "A<unk>A");
}

TEST(SyntheticTokenizerTest, ConfigOverridesPostProcessor) {
  const Json j = TinyBpe(Json::array());
  auto with_template = LoadJson("template", j);
  ASSERT_NE(with_template, nullptr);
  EXPECT_THAT(with_template->Encode("a"), ElementsAre(1, 3, 4));

  const std::string config = R"({"add_bos_token": false, "add_eos_token": true,
                                 "bos_token": "<s>", "eos_token": {"content": "</s>"}})";
  auto t = LoadJson("config", j, &config);
  ASSERT_NE(t, nullptr);
  EXPECT_THAT(t->Encode("a"), ElementsAre(3, 4, 2));
  EXPECT_THAT(t->Encode("a", false), ElementsAre(3, 4));
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
}

TEST(SyntheticTokenizerTest, LegacyMetaspacePreTokenizer) {
  Json j = TinyBpe(Json::array({"c \xE2\x96\x81", "\xE2\x96\x81 a", "a b"}));
  j["model"]["vocab"]["c\xE2\x96\x81"] = 11;
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"},
                        {"replacement", "\xE2\x96\x81"},
                        {"prepend_scheme", "first"},
                        {"split", true}};
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"},
                  {"prepend_scheme", "first"}};
  auto t = LoadJson("metaspace", j);
  ASSERT_NE(t, nullptr);
  // Words split before each "▁", so "c▁" cannot merge across the boundary.
  EXPECT_THAT(t->Encode("c a", false), ElementsAre(3, 6, 9));
  EXPECT_THAT(t->Encode("ab a", false), ElementsAre(9, 5, 9));
  // "first": only the start of the input gets "▁", not the text after a special token.
  EXPECT_THAT(t->Encode("a<s>a", false), ElementsAre(9, 1, 4));
  // An existing leading space is not doubled, unlike the Prepend normalizer.
  EXPECT_THAT(t->Encode(" a", false), ElementsAre(9));
  EXPECT_EQ(t->Decode(t->Encode("ab a")), "ab a");

  j["pre_tokenizer"]["split"] = false;
  auto unsplit = LoadJson("unsplit", j);
  ASSERT_NE(unsplit, nullptr);
  EXPECT_THAT(unsplit->Encode("c a", false), ElementsAre(3, 11, 4));
}

TEST(SyntheticTokenizerTest, AddedTokensHonourStripAndSpecialFlags) {
  Json j = TinyBpe(Json::array({"\xE2\x96\x81 a"}));
  j["added_tokens"].push_back({{"id", 11}, {"content", "<sep>"}, {"special", false},
                               {"lstrip", true}, {"rstrip", true}});
  auto t = LoadJson("added", j);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->vocab_size(), 12);
  EXPECT_EQ(t->IdForPiece("<sep>"), 11);
  EXPECT_EQ(t->PieceForId(11), "<sep>");
  EXPECT_FALSE(t->IsSpecial(11));
  // The spaces around "<sep>" belong to it; each side is normalized on its own.
  EXPECT_THAT(t->Encode("a  <sep> a", false), ElementsAre(9, 11, 9));
  // A non-special added token survives skip_special_tokens.
  EXPECT_EQ(t->Decode({1, 9, 11, 9}), "a<sep> a");
}

// Errors name the file and the problem.

TEST(TokenizerErrorTest, MissingFileIsNotFound) {
  const auto dir = testing::ScratchDir("empty");
  auto t = Tokenizer::Load(dir);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr((dir / "tokenizer.json").string()));
}

struct BadTokenizer {
  const char* name;
  std::string json;
  absl::StatusCode code;
  const char* expected;  // Substring of the error.
};

void PrintTo(const BadTokenizer& bad, std::ostream* os) { *os << bad.name; }

class TokenizerErrorParamTest : public ::testing::TestWithParam<BadTokenizer> {};

TEST_P(TokenizerErrorParamTest, NamesFileAndField) {
  const auto dir = WriteTokenizer(GetParam().name, GetParam().json);
  auto t = Tokenizer::Load(dir);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), GetParam().code) << t.status();
  EXPECT_THAT(std::string(t.status().message()), HasSubstr((dir / "tokenizer.json").string()));
  EXPECT_THAT(std::string(t.status().message()), HasSubstr(GetParam().expected));
}

Json Without(Json j, const std::string& model_key) {
  j["model"].erase(model_key);
  return j;
}
Json With(Json j, const std::string& key, Json value) {
  j[key] = std::move(value);
  return j;
}

INSTANTIATE_TEST_SUITE_P(
    All, TokenizerErrorParamTest,
    ::testing::Values(
        BadTokenizer{"truncated", "{\"model\": {", absl::StatusCode::kInvalidArgument,
                     "not a valid JSON"},
        BadTokenizer{"array", "[1, 2]", absl::StatusCode::kInvalidArgument, "not a valid JSON"},
        BadTokenizer{"no_model", "{\"version\": \"1.0\"}", absl::StatusCode::kInvalidArgument,
                     "\"model\""},
        BadTokenizer{"no_vocab", Without(TinyBpe(Json::array()), "vocab").dump(),
                     absl::StatusCode::kInvalidArgument, "model.vocab"},
        BadTokenizer{"no_merges", Without(TinyBpe(Json::array()), "merges").dump(),
                     absl::StatusCode::kInvalidArgument, "model.merges"},
        BadTokenizer{"bad_merge", TinyBpe(Json::array({"a zz"})).dump(),
                     absl::StatusCode::kInvalidArgument, "model.merges\"[0]"},
        BadTokenizer{"bad_merge_shape", TinyBpe(Json::array({"abc"})).dump(),
                     absl::StatusCode::kInvalidArgument, "model.merges\"[0]"},
        BadTokenizer{"bad_id",
                     With(TinyBpe(Json::array()), "model",
                          {{"type", "BPE"}, {"vocab", {{"a", "zero"}}}, {"merges", Json::array()}})
                         .dump(),
                     absl::StatusCode::kInvalidArgument, "model.vocab"},
        BadTokenizer{"bad_unk",
                     With(TinyBpe(Json::array()), "model",
                          {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", Json::array()},
                           {"unk_token", "<unk>"}})
                         .dump(),
                     absl::StatusCode::kInvalidArgument, "model.unk_token"},
        BadTokenizer{"bad_added", With(TinyBpe(Json::array()), "added_tokens", {{{"id", 1}}}).dump(),
                     absl::StatusCode::kInvalidArgument, "added_tokens\"[0]"},
        BadTokenizer{"unigram",
                     With(TinyBpe(Json::array()), "model",
                          {{"type", "Unigram"}, {"vocab", Json::array()}})
                         .dump(),
                     absl::StatusCode::kUnimplemented, "Unigram"},
        // Byte-level BPE is supported, but not with a SentencePiece normalizer.
        BadTokenizer{"byte_level_with_normalizer",
                     With(TinyBpe(Json::array()), "pre_tokenizer",
                          {{"type", "ByteLevel"}, {"add_prefix_space", false}})
                         .dump(),
                     absl::StatusCode::kUnimplemented, "field \"normalizer\""},
        BadTokenizer{"nfkc", With(TinyBpe(Json::array()), "normalizer", {{"type", "NFKC"}}).dump(),
                     absl::StatusCode::kUnimplemented, "NFKC"}),
    [](const ::testing::TestParamInfo<BadTokenizer>& info) { return std::string(info.param.name); });

TEST(TokenizerErrorTest, MalformedConfigNamesConfigFile) {
  const std::string config = "{\"add_bos_token\": ";
  const auto dir = WriteTokenizer("bad_config", TinyBpe(Json::array()).dump(), &config);
  auto t = Tokenizer::Load(dir);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()),
              HasSubstr((dir / "tokenizer_config.json").string()));
}

TEST(TokenizerErrorTest, ConfigTokenMissingFromVocab) {
  const std::string config = R"({"bos_token": "<bos>"})";
  const auto dir = WriteTokenizer("bad_bos", TinyBpe(Json::array()).dump(), &config);
  auto t = Tokenizer::Load(dir);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("bos_token"));
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("<bos>"));
}

}  // namespace
}  // namespace tessera
