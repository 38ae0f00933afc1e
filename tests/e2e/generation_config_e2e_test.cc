// generation_config.json over a live cluster: a request that leaves sampling and
// max_new_tokens unset gets the file's defaults, and the file's eos ids end generation
// with finish reason eos (as <|eot_id|> ends a Llama 3 instruct turn).
#include <algorithm>
#include <fstream>

#include "gtest/gtest.h"
#include "tests/e2e/serving_util.h"
#include "tests/support/cluster.h"
#include "tests/support/test_model.h"
#include "tests/worker/test_expected.h"

namespace tessera {
namespace {

using ::tessera::testing::RunUnary;

TEST(GenerationConfigE2eTest, FileDefaultsAndEosIdsApplyToRequestsThatLeaveThemUnset) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const auto expected = testing::LoadExpected();
  // An id the greedy continuation reaches early, which config.json does not call eos.
  const int32_t eos_id = expected.generated_ids[9];
  const auto first = std::find(expected.generated_ids.begin(), expected.generated_ids.end(), eos_id);
  const std::vector<int32_t> until_eos(expected.generated_ids.begin(), first + 1);

  const auto defaults_dir = testing::ScratchDir("generation_config");
  std::ofstream(defaults_dir / "generation_config.json")
      << "{\"do_sample\": false, \"temperature\": 0.9, \"eos_token_id\": [" << eos_id
      << "], \"max_new_tokens\": 40}\n";
  testing::ClusterOptions options;
  options.model_dir = testing::StoriesModelDir();
  options.log_dir = testing::ScratchDir("cluster");
  options.kv_memory_mb = 16;
  options.coordinator_flags = {"--generation-config=" + defaults_dir.string()};
  auto cluster = testing::Cluster::Start(std::move(options));
  ASSERT_TRUE(cluster.ok()) << cluster.status().message();

  // No sampling and no stopping fields: greedy (do_sample false) until the file's eos id.
  v1::GenerateRequest request;
  request.mutable_token_ids()->mutable_ids()->Add(expected.prompt_ids.begin(),
                                                  expected.prompt_ids.end());
  const auto ended = RunUnary((*cluster)->api(), request);
  ASSERT_TRUE(ended.status.ok()) << ended.status.error_message();
  EXPECT_EQ(ended.ids(), until_eos);
  EXPECT_EQ(ended.response.finish_reason(), v1::FINISH_REASON_EOS);

  // Past eos, the file's max_new_tokens is the default length.
  request.mutable_stopping()->set_ignore_eos(true);
  const auto long_run = RunUnary((*cluster)->api(), request);
  ASSERT_TRUE(long_run.status.ok()) << long_run.status.error_message();
  EXPECT_EQ(long_run.ids(), std::vector<int32_t>(expected.generated_ids.begin(),
                                                 expected.generated_ids.begin() + 40));
  EXPECT_EQ(long_run.response.finish_reason(), v1::FINISH_REASON_LENGTH);

  // What a request sets wins over the file.
  request.mutable_stopping()->set_max_new_tokens(12);
  const auto short_run = RunUnary((*cluster)->api(), request);
  ASSERT_TRUE(short_run.status.ok()) << short_run.status.error_message();
  EXPECT_EQ(short_run.ids().size(), 12u);
}

TEST(GenerationConfigE2eTest, CoordinatorRefusesAnInvalidFileNamingIt) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const auto defaults_dir = testing::ScratchDir("bad_generation_config");
  std::ofstream(defaults_dir / "generation_config.json") << "{\"top_p\": 7}\n";
  testing::ClusterOptions options;
  options.model_dir = testing::StoriesModelDir();
  options.log_dir = testing::ScratchDir("cluster");
  options.kv_memory_mb = 16;
  options.ready_timeout = std::chrono::seconds(20);
  options.coordinator_flags = {"--generation-config=" + defaults_dir.string()};
  auto cluster = testing::Cluster::Start(std::move(options));
  ASSERT_FALSE(cluster.ok());
  EXPECT_NE(cluster.status().message().find("generation_config.json"), std::string::npos)
      << cluster.status().message();
  EXPECT_NE(cluster.status().message().find("top_p"), std::string::npos)
      << cluster.status().message();
}

}  // namespace
}  // namespace tessera
