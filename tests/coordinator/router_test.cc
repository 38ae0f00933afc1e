#include "coordinator/scheduler/router.h"

#include <memory>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace tessera::sched {
namespace {

std::vector<int32_t> Range(int32_t first, int n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

Request Req(SeqId id, std::vector<int32_t> prompt, int max_new_tokens = 1) {
  Request r;
  r.seq_id = id;
  r.prompt_token_ids = std::move(prompt);
  r.options.max_new_tokens = max_new_tokens;
  return r;
}

class RouterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 2; ++i) {
      SchedulerConfig c;
      c.num_blocks = 65;
      c.block_size = 4;
      c.max_num_batched_tokens = 64;
      c.max_num_seqs = 8;
      auto s = Scheduler::Create(c);
      ASSERT_TRUE(s.ok()) << s.status();
      owned_.push_back(std::move(*s));
      replicas_.push_back(owned_.back().get());
    }
  }

  // Runs one replica until it is idle, answering every sampling sequence with token 1.
  void Drain(Scheduler& s) {
    while (s.HasWork()) {
      StepPlan plan = s.Schedule();
      StepResult result{plan.step_id, {}};
      for (const auto& d : plan.new_seqs) if (d.samples_token) result.sampled.push_back({d.seq_id, 1});
      for (const auto& d : plan.cached_seqs) if (d.samples_token) result.sampled.push_back({d.seq_id, 1});
      ASSERT_TRUE(s.Update(result).ok());
    }
  }

  std::vector<std::unique_ptr<Scheduler>> owned_;
  std::vector<Scheduler*> replicas_;
};

TEST_F(RouterTest, SharedPrefixGoesToTheReplicaHoldingIt) {
  Router router(replicas_);
  const std::vector<int32_t> system_prompt = Range(100, 40);  // 10 blocks.
  std::vector<int32_t> first = system_prompt;
  first.push_back(7);
  EXPECT_EQ(*router.AddRequest(Req(1, first)), 0);  // Equal costs: the lower index.
  Drain(*replicas_[0]);
  // Replica 0 is busier (a running request holds 4 blocks) but holds the prefix.
  ASSERT_TRUE(replicas_[0]->AddRequest(Req(2, Range(500, 16), 8)).ok());
  StepPlan plan = replicas_[0]->Schedule();
  ASSERT_TRUE(replicas_[0]->Update({plan.step_id, {{2, 1}}}).ok());
  ASSERT_EQ(replicas_[0]->kv_cache_manager().pool().num_used_blocks(), 4);
  std::vector<int32_t> second = system_prompt;
  second.push_back(9);
  second.push_back(10);
  EXPECT_EQ(replicas_[0]->NumCachedPrefixBlocks(second), 10);
  EXPECT_LT(router.Cost(0, second), router.Cost(1, second));
  EXPECT_EQ(router.Route(second), 0);
  // An unrelated prompt avoids the loaded replica.
  EXPECT_EQ(router.Route(Range(900, 20)), 1);
}

TEST_F(RouterTest, HeavyLoadOutweighsThePrefixWhenLoadWeighsMore) {
  Router router(replicas_, RouterOptions{.load_weight = 4.0});
  std::vector<int32_t> prompt = Range(100, 9);  // Two cacheable blocks.
  ASSERT_TRUE(replicas_[0]->AddRequest(Req(1, prompt)).ok());
  Drain(*replicas_[0]);
  ASSERT_EQ(replicas_[0]->NumCachedPrefixBlocks(prompt), 2);
  EXPECT_EQ(router.Route(prompt), 0);
  ASSERT_TRUE(replicas_[0]->AddRequest(Req(2, Range(500, 8))).ok());  // 2 queued blocks.
  // Replica 0: 3 - 2 + 4 * 2 = 9; replica 1: 3 + 0 = 3.
  EXPECT_DOUBLE_EQ(router.Cost(0, prompt), 9.0);
  EXPECT_DOUBLE_EQ(router.Cost(1, prompt), 3.0);
  EXPECT_EQ(router.Route(prompt), 1);
}

TEST_F(RouterTest, UnrelatedRequestsSpreadAcrossReplicas) {
  Router router(replicas_);
  int counts[2] = {0, 0};
  for (SeqId id = 0; id < 10; ++id) {
    auto replica = router.AddRequest(Req(id, Range(1000 * (id + 1), 12)));
    ASSERT_TRUE(replica.ok()) << replica.status();
    ++counts[*replica];
  }
  EXPECT_EQ(counts[0], 5);
  EXPECT_EQ(counts[1], 5);
}

TEST(RouterNoReplicaTest, FailsWithoutReplicas) {
  Router router({});
  EXPECT_EQ(router.Route(Range(0, 4)), -1);
  EXPECT_EQ(router.AddRequest(Req(1, Range(0, 4))).status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace tessera::sched
