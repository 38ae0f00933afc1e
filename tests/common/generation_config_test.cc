// generation_config.json: what a request gets by default and what ends generation.
#include "common/generation_config.h"

#include <fstream>

#include "gtest/gtest.h"
#include "tests/support/test_model.h"

namespace tessera {
namespace {

ModelConfig Model(std::vector<int> eos, int vocab = 128256) {
  ModelConfig m;
  m.vocab_size = vocab;
  m.eos_token_ids = std::move(eos);
  return m;
}

TEST(GenerationConfigTest, Llama31InstructStopsOnEveryEndOfTurnId) {
  // As shipped with Llama-3.1-8B-Instruct.
  auto g = GenerationConfig::FromJson(R"({"bos_token_id": 128000, "do_sample": true,
      "eos_token_id": [128001, 128008, 128009], "temperature": 0.6, "top_p": 0.9,
      "transformers_version": "4.42.3"})", "generation_config.json");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->StopTokenIds(Model({128009})), (std::vector<int32_t>{128009, 128001, 128008}));
  const SamplingParams p = g->DefaultSampling();
  EXPECT_FLOAT_EQ(p.temperature, 0.6f);
  EXPECT_FLOAT_EQ(p.top_p, 0.9f);
  EXPECT_EQ(p.top_k, 0);
  EXPECT_FLOAT_EQ(p.repetition_penalty, 1.0f);
}

TEST(GenerationConfigTest, QwenDefaultsIncludeTopKAndRepetitionPenalty) {
  auto g = GenerationConfig::FromJson(R"({"bos_token_id": 151643, "pad_token_id": 151643,
      "do_sample": true, "eos_token_id": [151645, 151643], "repetition_penalty": 1.05,
      "temperature": 0.7, "top_p": 0.8, "top_k": 20})", "g.json");
  ASSERT_TRUE(g.ok()) << g.status();
  const SamplingParams p = g->DefaultSampling();
  EXPECT_FLOAT_EQ(p.temperature, 0.7f);
  EXPECT_FLOAT_EQ(p.top_p, 0.8f);
  EXPECT_EQ(p.top_k, 20);
  EXPECT_FLOAT_EQ(p.repetition_penalty, 1.05f);
  EXPECT_EQ(g->StopTokenIds(Model({151643}, 152064)), (std::vector<int32_t>{151643, 151645}));
}

TEST(GenerationConfigTest, DoSampleFalseMeansGreedy) {
  auto g = GenerationConfig::FromJson(R"({"do_sample": false, "temperature": 0.6})", "g.json");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(g->DefaultSampling().greedy());
}

TEST(GenerationConfigTest, EmptyConfigKeepsTesseraDefaults) {
  auto g = GenerationConfig::FromJson("{}", "g.json");
  ASSERT_TRUE(g.ok()) << g.status();
  const SamplingParams p = g->DefaultSampling();
  const SamplingParams d;
  EXPECT_EQ(p.temperature, d.temperature);
  EXPECT_EQ(p.top_p, d.top_p);
  EXPECT_EQ(g->StopTokenIds(Model({2})), (std::vector<int32_t>{2}));
  EXPECT_FALSE(g->max_new_tokens.has_value());
}

TEST(GenerationConfigTest, MissingFileIsAnEmptyConfig) {
  const auto dir = testing::ScratchDir("nofile");
  auto g = GenerationConfig::LoadIfPresent(dir, Model({2}, 300));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(g->eos_token_ids.empty());
}

TEST(GenerationConfigTest, IdOutsideTheVocabularyNamesFileAndId) {
  const auto dir = testing::ScratchDir("badid");
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": [2, 300]})";
  auto g = GenerationConfig::LoadIfPresent(dir, Model({2}, 300));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("generation_config.json"), std::string::npos) << g.status();
  EXPECT_NE(g.status().message().find("eos_token_id 300"), std::string::npos) << g.status();
}

struct BadField {
  const char* json;
  const char* expect;
};

class GenerationConfigErrorTest : public ::testing::TestWithParam<BadField> {};

TEST_P(GenerationConfigErrorTest, NamesTheField) {
  auto g = GenerationConfig::FromJson(GetParam().json, "gen.json");
  ASSERT_FALSE(g.ok()) << GetParam().json;
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("gen.json"), std::string::npos) << g.status();
  EXPECT_NE(g.status().message().find(GetParam().expect), std::string::npos) << g.status();
}

INSTANTIATE_TEST_SUITE_P(
    Bad, GenerationConfigErrorTest,
    ::testing::Values(BadField{"[1, 2]", "not a valid JSON object"},
                      BadField{"{\"temperature\": -1}", "temperature"},
                      BadField{"{\"temperature\": \"hot\"}", "temperature"},
                      BadField{"{\"top_p\": 0}", "top_p"},
                      BadField{"{\"top_p\": 1.5}", "top_p"},
                      BadField{"{\"top_k\": -3}", "top_k"},
                      BadField{"{\"min_p\": 1}", "min_p"},
                      BadField{"{\"repetition_penalty\": 0}", "repetition_penalty"},
                      BadField{"{\"max_new_tokens\": 0}", "max_new_tokens"},
                      BadField{"{\"eos_token_id\": \"</s>\"}", "eos_token_id"},
                      BadField{"{\"eos_token_id\": [1, -2]}", "eos_token_id"},
                      BadField{"{\"bos_token_id\": [1, 2]}", "bos_token_id"},
                      BadField{"{\"do_sample\": 1}", "do_sample"}));

}  // namespace
}  // namespace tessera
