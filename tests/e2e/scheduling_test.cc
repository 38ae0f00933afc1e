// The scheduler end to end on stories260K: preemption keeps outputs exact, prefix caching
// saves prefill, and the router keeps shared prefixes together while spreading load.
#include <algorithm>
#include <future>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/e2e/http_get.h"
#include "tests/e2e/metrics_text.h"
#include "tests/e2e/serving_util.h"

namespace tessera::testing {
namespace {

// With a KV cache far too small for the offered load, sequences are preempted and
// recomputed; every request must still return exactly what it returns alone.
TEST(SchedulingE2eTest, PreemptionKeepsOutputsExact) {
  TESSERA_REQUIRE_STORIES_MODEL();
  ClusterOptions options;
  options.kv_memory_mb = 1;  // About 50 blocks of 16 tokens on stories260K.
  auto cluster = StartStories(/*tp=*/1, /*replicas=*/1, options);
  ASSERT_NE(cluster, nullptr);
  auto info = cluster->ModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  const int blocks = static_cast<int>(info->replica_info(0).total_blocks());
  ASSERT_LT(blocks, 80) << "the test needs a small KV cache";

  // 12 requests of ~10 blocks each need well over the cache at once.
  std::vector<v1::GenerateRequest> requests;
  for (int i = 0; i < 12; ++i) requests.push_back(GreedyIds(RandomIds(8 + i, 100 + i), 150));
  std::vector<std::vector<int32_t>> alone;
  for (const auto& r : requests) {
    UnaryResult res = RunUnary(cluster->api(), r);
    ASSERT_TRUE(res.status.ok()) << res.status.error_message();
    alone.push_back(res.ids());
  }
  std::vector<std::future<UnaryResult>> together;
  for (const auto& r : requests) {
    together.push_back(std::async(std::launch::async, [&cluster, r] { return RunUnary(cluster->api(), r); }));
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    UnaryResult res = together[i].get();
    ASSERT_TRUE(res.status.ok()) << "request " << i << ": " << res.status.error_message();
    EXPECT_EQ(res.ids(), alone[i]) << "request " << i;
    EXPECT_EQ(res.response.finish_reason(), v1::FINISH_REASON_LENGTH);
  }
  // Everything returns to the pool (the engine publishes its gauges once per loop, so
  // give it a moment).
  uint32_t running = 1, free_blocks = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    auto after = cluster->ModelInfo();
    ASSERT_TRUE(after.ok());
    running = after->replica_info(0).running();
    free_blocks = after->replica_info(0).free_blocks();
    if (running == 0 && free_blocks == info->replica_info(0).free_blocks()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(running, 0u);
  EXPECT_EQ(free_blocks, info->replica_info(0).free_blocks());
}

// The sum of a metric's samples (every replica) on the coordinator's /metrics.
double CoordinatorMetricSum(int metrics_port, const std::string& name) {
  return MetricSum(HttpGet(metrics_port, "/metrics").body, name);
}

// The host KV tier at tp 1 and 2: a prompt whose blocks the device pool had to give up
// comes back from host memory (cached prompt tokens, host-tier hits) with exactly the
// tokens it got when it was computed.
class HostTierE2eTest : public ::testing::TestWithParam<int> {};

TEST_P(HostTierE2eTest, EvictedPrefixComesBackFromHostMemoryWithTheSameTokens) {
  TESSERA_REQUIRE_STORIES_MODEL();
  ClusterOptions options;
  options.kv_memory_mb = 1;  // About 50 blocks of 16 tokens per rank's heads.
  options.coordinator_flags = {"--kv-host-cache-gb", "0.01"};
  auto cluster = StartStories(GetParam(), /*replicas=*/1, options);
  ASSERT_NE(cluster, nullptr);
  auto info = cluster->ModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  const int blocks = static_cast<int>(info->replica_info(0).total_blocks());
  // 0.01 GiB over a block's 20 KiB (10 KiB per rank at tp 2).
  EXPECT_EQ(info->replica_info(0).host_total_blocks(), GetParam() == 1 ? 524u : 1048u);
  EXPECT_GT(info->replica_info(0).memory().host_cache_bytes(), 10'000'000u);

  const std::vector<int32_t> prompt = RandomIds(200, 42);  // 12 full blocks, then 8 tokens.
  UnaryResult first = RunUnary(cluster->api(), GreedyIds(prompt, 24));
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  // Other prompts of 13 blocks each, more than the whole pool: the first prompt's blocks
  // are evicted, and saved to the host tier.
  for (uint32_t i = 0; i * 13 < static_cast<uint32_t>(blocks) + 26; ++i) {
    UnaryResult other = RunUnary(cluster->api(), GreedyIds(RandomIds(200, 1000 + i), 4));
    ASSERT_TRUE(other.status.ok()) << other.status.error_message();
  }
  ASSERT_GT(CoordinatorMetricSum(cluster->metrics_port(), "tessera_kv_host_tier_saved_blocks_total"), 12);
  const double hits_before = CoordinatorMetricSum(cluster->metrics_port(), "tessera_kv_host_tier_hits_tokens_total");

  UnaryResult again = RunUnary(cluster->api(), GreedyIds(prompt, 24));
  ASSERT_TRUE(again.status.ok()) << again.status.error_message();
  EXPECT_EQ(again.ids(), first.ids()) << "the prefix loaded from host memory changed the greedy tokens";
  EXPECT_EQ(again.response.usage().cached_prompt_tokens(), 192u);
  // The engine publishes its counters once per loop.
  double hits = hits_before;
  for (int i = 0; i < 100 && hits < hits_before + 192; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    hits = CoordinatorMetricSum(cluster->metrics_port(), "tessera_kv_host_tier_hits_tokens_total");
  }
  EXPECT_EQ(hits - hits_before, 192) << "all 12 blocks should have come from the host tier";
}

INSTANTIATE_TEST_SUITE_P(Tp, HostTierE2eTest, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& info) { return "tp" + std::to_string(info.param); });

// A long shared prompt is computed once: the second request reports cached prompt tokens
// and reaches its first token sooner.
TEST(SchedulingE2eTest, SharedPrefixIsCachedAndCutsTimeToFirstToken) {
  TESSERA_REQUIRE_STORIES_MODEL();
  auto cluster = StartStories(/*tp=*/1);
  ASSERT_NE(cluster, nullptr);
  int faster = 0;
  for (uint32_t trial = 0; trial < 3; ++trial) {
    const std::vector<int32_t> prompt = RandomIds(480, 7 + trial);
    UnaryResult cold = RunUnary(cluster->api(), GreedyIds(prompt, 4));
    ASSERT_TRUE(cold.status.ok()) << cold.status.error_message();
    EXPECT_EQ(cold.response.usage().cached_prompt_tokens(), 0u);
    // Same prefix, different last tokens: 29 full blocks (464 tokens) are shared.
    std::vector<int32_t> sibling = prompt;
    sibling.back() = 300;
    UnaryResult warm = RunUnary(cluster->api(), GreedyIds(sibling, 4));
    ASSERT_TRUE(warm.status.ok()) << warm.status.error_message();
    EXPECT_EQ(warm.response.usage().cached_prompt_tokens(), 464u);
    EXPECT_EQ(warm.response.usage().prompt_tokens(), 480u);
    faster += warm.response.timings().time_to_first_token_seconds() <
              cold.response.timings().time_to_first_token_seconds();
  }
  // 464 of 480 prompt tokens skipped: the warm request must be faster; allow one trial to
  // lose to scheduling noise on a loaded machine.
  EXPECT_GE(faster, 2);
}

// Two replicas: requests sharing a prefix follow it to one replica; unrelated concurrent
// load lands on both.
TEST(SchedulingE2eTest, RouterKeepsPrefixesTogetherAndSpreadsLoad) {
  TESSERA_REQUIRE_STORIES_MODEL();
  auto cluster = StartStories(/*tp=*/1, /*replicas=*/2);
  ASSERT_NE(cluster, nullptr);
  const std::vector<int32_t> prefix = RandomIds(200, 42);
  UnaryResult first = RunUnary(cluster->api(), GreedyIds(prefix, 2));
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  const uint32_t home = first.response.replica();
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> prompt = prefix;
    prompt.push_back(300 + i);
    UnaryResult r = RunUnary(cluster->api(), GreedyIds(prompt, 2));
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.response.replica(), home) << "request " << i << " left its prefix's replica";
    EXPECT_GE(r.response.usage().cached_prompt_tokens(), 192u);
  }
  std::vector<std::future<UnaryResult>> load;
  for (int i = 0; i < 8; ++i) {
    load.push_back(std::async(std::launch::async, [&cluster, i] {
      return RunUnary(cluster->api(), GreedyIds(RandomIds(64, 1000 + i), 40));
    }));
  }
  std::map<uint32_t, int> per_replica;
  for (auto& f : load) {
    UnaryResult r = f.get();
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    ++per_replica[r.response.replica()];
  }
  EXPECT_EQ(per_replica.size(), 2u) << "unrelated load stayed on one replica";
}

}  // namespace
}  // namespace tessera::testing
