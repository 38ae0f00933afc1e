#include "benchmarks/serving/workload.h"

#include <fstream>
#include <set>

#include "gtest/gtest.h"
#include "tests/support/test_model.h"

namespace tessera::bench {
namespace {

TEST(WorkloadTest, FixedLengthPromptsComeFromTheVocabulary) {
  const RandomTokens tokens{.vocab_size = 50, .first_id = 3, .seed = 7};
  const std::vector<RequestSpec> specs = FixedLengthWorkload(20, 33, 9, tokens);
  ASSERT_EQ(specs.size(), 20u);
  std::set<std::vector<int32_t>> distinct;
  for (const RequestSpec& s : specs) {
    EXPECT_FALSE(s.is_text);
    EXPECT_EQ(s.prompt_ids.size(), 33u);
    EXPECT_EQ(s.output_len, 9);
    for (int32_t id : s.prompt_ids) {
      EXPECT_GE(id, 3);
      EXPECT_LT(id, 50);
    }
    distinct.insert(s.prompt_ids);
  }
  EXPECT_EQ(distinct.size(), specs.size());
  // Same seed, same prompts.
  EXPECT_EQ(FixedLengthWorkload(20, 33, 9, tokens)[5].prompt_ids, specs[5].prompt_ids);
}

TEST(WorkloadTest, SharedPrefixesAreShared) {
  SharedPrefixOptions o{.num_prefixes = 3, .suffixes_per_prefix = 4, .prefix_len = 16,
                        .suffix_len = 5, .output_len = 7};
  const std::vector<RequestSpec> specs = SharedPrefixWorkload(o, {.vocab_size = 1000, .first_id = 3, .seed = 1});
  ASSERT_EQ(specs.size(), 12u);
  std::map<std::vector<int32_t>, int> by_prefix;
  std::set<std::vector<int32_t>> prompts;
  for (const RequestSpec& s : specs) {
    ASSERT_EQ(s.prompt_ids.size(), 21u);
    EXPECT_EQ(s.output_len, 7);
    ++by_prefix[std::vector<int32_t>(s.prompt_ids.begin(), s.prompt_ids.begin() + 16)];
    prompts.insert(s.prompt_ids);
  }
  EXPECT_EQ(by_prefix.size(), 3u);
  for (const auto& [prefix, count] : by_prefix) EXPECT_EQ(count, 4);
  EXPECT_EQ(prompts.size(), 12u);
}

TEST(WorkloadTest, JsonlTextAndIds) {
  const auto dir = testing::ScratchDir("jsonl");
  const auto path = dir / "w.jsonl";
  std::ofstream(path) << "{\"prompt\": \"Once upon a time\", \"output_len\": 5}\n"
                      << "\n"
                      << "{\"prompt\": [1, 2, 3]}\n";
  auto specs = LoadJsonlWorkload(path, 11);
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 2u);
  EXPECT_TRUE((*specs)[0].is_text);
  EXPECT_EQ((*specs)[0].prompt_text, "Once upon a time");
  EXPECT_EQ((*specs)[0].output_len, 5);
  EXPECT_FALSE((*specs)[1].is_text);
  EXPECT_EQ((*specs)[1].prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ((*specs)[1].output_len, 11);
}

TEST(WorkloadTest, JsonlErrorsNameTheLine) {
  const auto dir = testing::ScratchDir("jsonl_bad");
  const auto path = dir / "bad.jsonl";
  for (const std::string& line : {std::string("{\"prompt\": \"x\", \"output_len\": -1}"),
                                  std::string("{\"prompt\": [1, \"a\"], \"output_len\": 2}"),
                                  std::string("not json"), std::string("{\"output_len\": 2}")}) {
    std::ofstream(path) << "{\"prompt\": \"ok\", \"output_len\": 1}\n" << line << "\n";
    auto specs = LoadJsonlWorkload(path, 0);
    ASSERT_FALSE(specs.ok()) << line;
    EXPECT_NE(specs.status().message().find("bad.jsonl:2"), std::string::npos) << specs.status();
  }
  EXPECT_FALSE(LoadJsonlWorkload(dir / "missing.jsonl", 1).ok());
}

}  // namespace
}  // namespace tessera::bench
