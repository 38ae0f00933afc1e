// A randomized run of thousands of requests through one scheduler and a fake executor,
// with shared prefixes, cancellations, priorities and a pool small enough to force
// preemption. Invariants are checked after every Schedule() and every Update(), and
// every request's output must equal what it generates alone.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <ostream>
#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "coordinator/scheduler/scheduler.h"
#include "gtest/gtest.h"
#include "tests/coordinator/fake_executor.h"
#include "tests/coordinator/scheduler_invariants.h"

namespace tessera::sched {
namespace {

constexpr int kVocab = 64;  // Small, so EOS (token 0) and stop tokens come up often.
constexpr int kNumRequests = 3000;
constexpr int kMaxSteps = 100000;

uint64_t ConstantHash(uint64_t, absl::Span<const int32_t>) { return 1; }

struct SimParams {
  const char* name;
  SchedulingPolicy policy;
  BlockHashFn hash_fn;
  int long_prefill_token_threshold;
  bool enable_prefix_caching;
  int num_speculative_tokens = 0;
  int num_host_blocks = 0;
};

void PrintTo(const SimParams& params, std::ostream* os) { *os << params.name; }

struct Tracked {
  testing::Reference reference;
  std::vector<int32_t> output;
  std::optional<FinishReason> reason;
  int arrival_step = 0;
  int finish_step = 0;
};

class SchedulerSimulationTest : public ::testing::TestWithParam<SimParams> {};

TEST_P(SchedulerSimulationTest, InvariantsHoldAndOutputsMatchRunningAlone) {
  const SimParams& params = GetParam();
  SchedulerConfig c;
  c.num_blocks = 40;  // 39 usable blocks of 4 tokens; a request needs up to 26.
  c.block_size = 4;
  c.max_num_batched_tokens = 32;
  c.max_num_seqs = 8;
  c.long_prefill_token_threshold = params.long_prefill_token_threshold;
  c.policy = params.policy;
  c.enable_prefix_caching = params.enable_prefix_caching;
  c.eos_token_ids = {0};
  c.block_hash_fn = params.hash_fn;
  c.num_speculative_tokens = params.num_speculative_tokens;
  c.num_host_blocks = params.num_host_blocks;
  auto created = Scheduler::Create(c);
  ASSERT_TRUE(created.ok()) << created.status();
  Scheduler& s = **created;
  testing::FakeExecutor exec(c.num_blocks, c.block_size, kVocab, c.num_host_blocks);

  std::mt19937_64 rng(20240607);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  std::vector<std::vector<int32_t>> stems(6);
  for (auto& stem : stems) {
    stem.resize(uniform(8, 40));
    for (int32_t& t : stem) t = uniform(1, kVocab - 1);
  }

  absl::flat_hash_map<SeqId, Tracked> tracked;
  std::vector<SeqId> live_list;  // For picking random cancellations.
  absl::flat_hash_set<SeqId> live;
  auto cancel_random = [&](int step) {
    if (live_list.empty()) return;
    const size_t i = uniform(0, static_cast<int>(live_list.size()) - 1);
    const SeqId id = live_list[i];
    ASSERT_TRUE(s.Abort(id).ok()) << id;
    tracked[id].reason = FinishReason::kCancelled;
    tracked[id].finish_step = step;
    live.erase(id);
    live_list[i] = live_list.back();
    live_list.pop_back();
  };

  SeqId next_id = 0;
  int step = 0;
  for (; step < kMaxSteps; ++step) {
    if (next_id < kNumRequests && chance(0.3)) {
      Request r;
      r.seq_id = next_id++;
      if (chance(0.3)) {
        // Block-aligned words from a tiny set: equal blocks under different parents.
        for (int n = uniform(1, 8); n > 0; --n) {
          const int32_t word = uniform(1, 3);
          for (int i = 0; i < c.block_size; ++i) r.prompt_token_ids.push_back(word);
        }
      } else if (chance(0.6)) {
        const auto& stem = stems[uniform(0, static_cast<int>(stems.size()) - 1)];
        r.prompt_token_ids.assign(stem.begin(), stem.begin() + uniform(1, stem.size()));
      }
      for (int n = uniform(r.prompt_token_ids.empty() ? 1 : 0, 24); n > 0; --n) {
        r.prompt_token_ids.push_back(uniform(1, kVocab - 1));
      }
      r.options.max_new_tokens = uniform(1, 40);
      if (chance(0.2)) r.options.min_new_tokens = uniform(0, r.options.max_new_tokens);
      r.options.ignore_eos = chance(0.1);
      if (chance(0.3)) r.options.stop_token_ids = {uniform(1, kVocab - 1)};
      r.options.priority = uniform(0, 3);
      Tracked& t = tracked[r.seq_id];
      t.reference = testing::GenerateAlone(r.prompt_token_ids, r.options, c.eos_token_ids, kVocab);
      t.arrival_step = step;
      live.insert(r.seq_id);
      live_list.push_back(r.seq_id);
      ASSERT_TRUE(s.AddRequest(std::move(r)).ok());
    }
    if (chance(0.01)) cancel_random(step);
    if (next_id == kNumRequests && !s.HasWork()) break;

    StepPlan plan = s.Schedule();
    ASSERT_NO_FATAL_FAILURE(testing::CheckPlan(plan, c));
    ASSERT_LE(s.stats().num_running, c.max_num_seqs);
    ASSERT_NO_FATAL_FAILURE(testing::CheckBlocks(s, live));
    StepResult result = exec.Execute(plan);
    ASSERT_FALSE(::testing::Test::HasFailure()) << "at step " << step;
    if (chance(0.01)) cancel_random(step);  // Cancelled while its step runs.
    auto events = s.Update(result);
    ASSERT_TRUE(events.ok()) << events.status();
    for (const SeqEvent& e : *events) {
      ASSERT_TRUE(live.contains(e.seq_id)) << "event for finished sequence " << e.seq_id;
      Tracked& t = tracked[e.seq_id];
      ASSERT_GE(e.new_token_ids.size(), 1u);
      ASSERT_LE(static_cast<int>(e.new_token_ids.size()), 1 + c.num_speculative_tokens);
      t.output.insert(t.output.end(), e.new_token_ids.begin(), e.new_token_ids.end());
      if (e.finish_reason.has_value()) {
        t.reason = e.finish_reason;
        t.finish_step = step;
        live.erase(e.seq_id);
        live_list.erase(std::find(live_list.begin(), live_list.end(), e.seq_id));
      }
    }
    ASSERT_NO_FATAL_FAILURE(testing::CheckBlocks(s, live));
  }
  ASSERT_LT(step, kMaxSteps) << "requests still running after " << kMaxSteps << " steps";
  EXPECT_EQ(exec.num_held(), 0);

  int num_cancelled = 0;
  int max_latency = 0;
  for (const auto& [id, t] : tracked) {
    ASSERT_TRUE(t.reason.has_value()) << "sequence " << id << " never finished";
    max_latency = std::max(max_latency, t.finish_step - t.arrival_step);
    if (*t.reason == FinishReason::kCancelled) {
      ++num_cancelled;
      ASSERT_LE(t.output.size(), t.reference.output.size()) << id;
      ASSERT_TRUE(std::equal(t.output.begin(), t.output.end(), t.reference.output.begin())) << id;
    } else {
      ASSERT_EQ(t.output, t.reference.output) << "sequence " << id;
      ASSERT_EQ(*t.reason, t.reference.reason) << "sequence " << id;
    }
  }
  const SchedulerStats stats = s.stats();
  std::printf("[%s] %d steps, %d cancelled, %lld preemptions, %lld/%lld prefix tokens hit "
              "(%lld from the host tier: %lld blocks saved, %lld loaded), longest request %d steps\n",
              params.name, step, num_cancelled, static_cast<long long>(stats.num_preemptions),
              static_cast<long long>(stats.prefix_cache_hit_tokens),
              static_cast<long long>(stats.prefix_cache_queried_tokens),
              static_cast<long long>(stats.host_tier_hit_tokens), static_cast<long long>(stats.host_tier_saved_blocks),
              static_cast<long long>(stats.host_tier_loaded_blocks), max_latency);
  EXPECT_EQ(static_cast<int>(tracked.size()), kNumRequests);
  EXPECT_EQ(stats.num_free_blocks, stats.num_usable_blocks);
  // The run must exercise what it claims to.
  EXPECT_GT(stats.num_preemptions, 0);
  EXPECT_GT(num_cancelled, 0);
  if (params.enable_prefix_caching) {
    EXPECT_GT(stats.prefix_cache_hit_tokens, 0);
  }
  if (params.num_speculative_tokens > 0) {
    EXPECT_GT(stats.num_lookahead_slots, 0);
  }
  if (params.num_host_blocks > 0) {
    EXPECT_GT(stats.host_tier_hit_tokens, 0);
    EXPECT_GT(stats.host_tier_saved_blocks, stats.host_tier_loaded_blocks);
    EXPECT_GT(stats.num_host_blocks_used, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Policies, SchedulerSimulationTest,
    ::testing::Values(
        SimParams{"fcfs", SchedulingPolicy::kFcfs, nullptr, 0, true},
        SimParams{"priority", SchedulingPolicy::kPriority, nullptr, 0, true},
        SimParams{"colliding_hash", SchedulingPolicy::kFcfs, &ConstantHash, 0, true},
        SimParams{"chunked_5", SchedulingPolicy::kPriority, nullptr, 5, true},
        SimParams{"no_prefix_cache", SchedulingPolicy::kFcfs, nullptr, 0, false},
        SimParams{"speculative_3", SchedulingPolicy::kFcfs, nullptr, 0, true, 3},
        SimParams{"speculative_5_priority_chunked", SchedulingPolicy::kPriority, nullptr, 5, true, 5},
        // The host tier: a small one (slots reused all the time) and one larger than the pool.
        SimParams{"host_tier_16", SchedulingPolicy::kFcfs, nullptr, 0, true, 0, 16},
        SimParams{"host_tier_200_colliding_hash", SchedulingPolicy::kFcfs, &ConstantHash, 0, true, 0, 200},
        SimParams{"host_tier_64_priority_chunked_speculative", SchedulingPolicy::kPriority, nullptr, 5, true, 3, 64}),
    [](const ::testing::TestParamInfo<SimParams>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tessera::sched
