#include "coordinator/scheduler/scheduler.h"

#include <functional>
#include <memory>
#include <numeric>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/scheduler_test_util.h"
#include "tests/coordinator/fake_executor.h"

namespace tessera::sched {
namespace {

using testing::Make;
using testing::MustUpdate;
using testing::Range;

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::IsEmpty;

constexpr int kVocab = 1000;

SchedulerConfig SmallConfig() {
  SchedulerConfig c;
  c.num_blocks = 11;
  c.block_size = 4;
  c.max_num_batched_tokens = 16;
  c.max_num_seqs = 4;
  c.eos_token_ids = {2};
  return c;
}

Request Req(SeqId id, std::vector<int32_t> prompt, int max_new_tokens = 8, int priority = 0) {
  Request r;
  r.seq_id = id;
  r.prompt_token_ids = std::move(prompt);
  r.options.max_new_tokens = max_new_tokens;
  r.options.priority = priority;
  return r;
}

// Answers every sampling sequence of the plan with token(seq_id).
StepResult Answer(const StepPlan& plan, const std::function<int32_t(SeqId)>& token) {
  StepResult r;
  r.step_id = plan.step_id;
  for (const auto& d : plan.new_seqs) if (d.samples_token) r.sampled.push_back({d.seq_id, token(d.seq_id)});
  for (const auto& d : plan.cached_seqs) if (d.samples_token) r.sampled.push_back({d.seq_id, token(d.seq_id)});
  return r;
}

// One step where every sampling sequence gets `token`; returns the events.
std::vector<SeqEvent> StepWith(Scheduler& s, int32_t token, StepPlan* plan_out = nullptr) {
  StepPlan plan = s.Schedule();
  std::vector<SeqEvent> events = MustUpdate(s, Answer(plan, [&](SeqId) { return token; }));
  if (plan_out != nullptr) *plan_out = std::move(plan);
  return events;
}

TEST(SchedulerTest, ChunkedPrefillUnderTheTokenBudget) {
  SchedulerConfig c = SmallConfig();
  c.max_num_batched_tokens = 8;
  auto s = Make(c);
  ASSERT_TRUE(s->AddRequest(Req(1, Range(10, 20), 3)).ok());

  StepPlan p = s->Schedule();
  ASSERT_EQ(p.new_seqs.size(), 1u);
  EXPECT_THAT(p.new_seqs[0].token_ids, ElementsAreArray(Range(10, 20)));
  EXPECT_THAT(p.new_seqs[0].block_ids, ElementsAre(1, 2));
  EXPECT_EQ(p.new_seqs[0].num_computed_tokens, 0);
  EXPECT_EQ(p.new_seqs[0].num_scheduled_tokens, 8);
  EXPECT_FALSE(p.new_seqs[0].samples_token);
  EXPECT_EQ(p.total_num_scheduled_tokens, 8);
  EXPECT_THAT(MustUpdate(*s, Answer(p, [](SeqId) { return 5; })), IsEmpty());

  p = s->Schedule();
  ASSERT_EQ(p.cached_seqs.size(), 1u);
  EXPECT_EQ(p.cached_seqs[0].num_computed_tokens, 8);
  EXPECT_EQ(p.cached_seqs[0].num_scheduled_tokens, 8);
  EXPECT_THAT(p.cached_seqs[0].new_block_ids, ElementsAre(3, 4));
  EXPECT_THAT(p.cached_seqs[0].new_token_ids, IsEmpty());
  EXPECT_FALSE(p.cached_seqs[0].samples_token);
  MustUpdate(*s, Answer(p, [](SeqId) { return 5; }));

  p = s->Schedule();
  ASSERT_EQ(p.cached_seqs.size(), 1u);
  EXPECT_EQ(p.cached_seqs[0].num_scheduled_tokens, 4);
  EXPECT_THAT(p.cached_seqs[0].new_block_ids, ElementsAre(5));
  EXPECT_TRUE(p.cached_seqs[0].samples_token);
  std::vector<SeqEvent> events = MustUpdate(*s, Answer(p, [](SeqId) { return 77; }));
  ASSERT_EQ(events.size(), 1u);
  ASSERT_EQ(events[0].new_token_ids.size(), 1u);
  EXPECT_EQ(events[0].new_token_ids[0], 77);
  EXPECT_FALSE(events[0].finish_reason.has_value());

  p = s->Schedule();  // Decode: the token sampled last step goes to the workers.
  ASSERT_EQ(p.cached_seqs.size(), 1u);
  EXPECT_THAT(p.cached_seqs[0].new_token_ids, ElementsAre(77));
  EXPECT_EQ(p.cached_seqs[0].num_computed_tokens, 20);
  EXPECT_EQ(p.cached_seqs[0].num_scheduled_tokens, 1);
  EXPECT_THAT(p.cached_seqs[0].new_block_ids, ElementsAre(6));
  EXPECT_TRUE(p.cached_seqs[0].samples_token);
}

TEST(SchedulerTest, LongPrefillThresholdCapsChunks) {
  SchedulerConfig c = SmallConfig();
  c.long_prefill_token_threshold = 3;
  auto s = Make(c);
  ASSERT_TRUE(s->AddRequest(Req(1, Range(10, 7))).ok());
  std::vector<int> chunks;
  for (int i = 0; i < 4; ++i) {
    StepPlan p;
    StepWith(*s, 5, &p);
    chunks.push_back(p.total_num_scheduled_tokens);
  }
  EXPECT_THAT(chunks, ElementsAre(3, 3, 1, 1));
}

TEST(SchedulerTest, RunningDecodesComeBeforeNewPrefills) {
  SchedulerConfig c = SmallConfig();
  c.max_num_batched_tokens = 8;
  auto s = Make(c);
  ASSERT_TRUE(s->AddRequest(Req(1, Range(10, 4))).ok());
  StepWith(*s, 5);
  ASSERT_TRUE(s->AddRequest(Req(2, Range(30, 20))).ok());
  StepPlan p = s->Schedule();
  ASSERT_EQ(p.cached_seqs.size(), 1u);
  EXPECT_EQ(p.cached_seqs[0].seq_id, 1);
  EXPECT_EQ(p.cached_seqs[0].num_scheduled_tokens, 1);
  ASSERT_EQ(p.new_seqs.size(), 1u);
  EXPECT_EQ(p.new_seqs[0].seq_id, 2);
  EXPECT_EQ(p.new_seqs[0].num_scheduled_tokens, 7);  // The rest of the budget.
  EXPECT_EQ(p.total_num_scheduled_tokens, 8);
}

TEST(SchedulerTest, MaxNumSeqsBoundsTheRunningQueue) {
  SchedulerConfig c = SmallConfig();
  c.max_num_seqs = 2;
  auto s = Make(c);
  for (SeqId id = 1; id <= 3; ++id) ASSERT_TRUE(s->AddRequest(Req(id, Range(10 * id, 2), 2)).ok());
  StepPlan p;
  StepWith(*s, 5, &p);
  EXPECT_EQ(p.num_scheduled_seqs(), 2);
  EXPECT_EQ(s->stats().num_running, 2);
  EXPECT_EQ(s->stats().num_waiting, 1);
  std::vector<SeqEvent> events = StepWith(*s, 5, &p);  // Both reach max_new_tokens.
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].finish_reason, FinishReason::kLength);
  StepWith(*s, 5, &p);
  ASSERT_EQ(p.new_seqs.size(), 1u);
  EXPECT_EQ(p.new_seqs[0].seq_id, 3);
  EXPECT_THAT(p.finished_ids, ElementsAre(1, 2));
}

// Runs the scheduler with a FakeExecutor until it is idle; returns every plan.
std::vector<StepPlan> RunToEnd(Scheduler& s, std::vector<std::vector<int32_t>>* outputs) {
  testing::FakeExecutor exec(s.config().num_blocks, s.config().block_size, kVocab);
  std::vector<StepPlan> plans;
  while (s.HasWork() && plans.size() < 1000) {
    StepPlan plan = s.Schedule();
    auto events = s.Update(exec.Execute(plan));
    EXPECT_TRUE(events.ok()) << events.status();
    for (const SeqEvent& e : *events) {
      (*outputs)[e.seq_id].insert((*outputs)[e.seq_id].end(), e.new_token_ids.begin(), e.new_token_ids.end());
    }
    plans.push_back(std::move(plan));
  }
  return plans;
}

std::vector<int32_t> Alone(const std::vector<int32_t>& prompt, int max_new_tokens) {
  RequestOptions o;
  o.max_new_tokens = max_new_tokens;
  return testing::GenerateAlone(prompt, o, {}, kVocab).output;
}

TEST(SchedulerTest, PreemptsTheLatestArrivalAndResumesWithItsTokens) {
  SchedulerConfig c = SmallConfig();
  c.num_blocks = 5;  // 4 usable: two sequences of up to 3 blocks each cannot both fit.
  c.eos_token_ids.clear();
  auto s = Make(c);
  ASSERT_TRUE(s->AddRequest(Req(1, Range(0, 4), 8)).ok());
  ASSERT_TRUE(s->AddRequest(Req(2, Range(50, 4), 8)).ok());
  std::vector<std::vector<int32_t>> out(3);
  std::vector<StepPlan> plans = RunToEnd(*s, &out);

  // Step 6: sequence 1 needs its third block; sequence 2 (the tail) is preempted.
  ASSERT_GE(plans.size(), 9u);
  EXPECT_THAT(plans[5].preempted_ids, ElementsAre(2));
  ASSERT_EQ(plans[5].cached_seqs.size(), 1u);
  EXPECT_EQ(plans[5].cached_seqs[0].seq_id, 1);
  EXPECT_THAT(plans[5].cached_seqs[0].new_block_ids, ElementsAre(4));  // Sequence 2's tail.
  // Step 9, after sequence 1 finished: sequence 2 returns with prompt + 5 generated
  // tokens, its first block still cached, and its last block recomputed.
  ASSERT_EQ(plans[8].new_seqs.size(), 1u);
  const NewSeqData& resumed = plans[8].new_seqs[0];
  EXPECT_EQ(resumed.seq_id, 2);
  std::vector<int32_t> expected_tokens = Range(50, 4);
  const std::vector<int32_t> alone2 = Alone(Range(50, 4), 8);
  expected_tokens.insert(expected_tokens.end(), alone2.begin(), alone2.begin() + 5);
  EXPECT_THAT(resumed.token_ids, ElementsAreArray(expected_tokens));
  EXPECT_EQ(resumed.num_computed_tokens, 4);
  EXPECT_EQ(resumed.num_scheduled_tokens, 5);
  EXPECT_THAT(resumed.block_ids, ElementsAre(2, 4, 3));

  EXPECT_EQ(out[1], Alone(Range(0, 4), 8));
  EXPECT_EQ(out[2], alone2);
  EXPECT_EQ(s->stats().num_preemptions, 1);
  EXPECT_EQ(s->stats().num_free_blocks, 4);
}

TEST(SchedulerTest, PriorityPreemptsTheLowestPriorityRunningSequence) {
  SchedulerConfig c = SmallConfig();
  c.num_blocks = 5;
  c.eos_token_ids.clear();
  c.policy = SchedulingPolicy::kPriority;
  auto s = Make(c);
  ASSERT_TRUE(s->AddRequest(Req(1, Range(0, 4), 8, /*priority=*/5)).ok());
  ASSERT_TRUE(s->AddRequest(Req(2, Range(50, 4), 8, /*priority=*/0)).ok());
  std::vector<std::vector<int32_t>> out(3);
  std::vector<StepPlan> plans = RunToEnd(*s, &out);
  // Same shape as the FCFS case, but the earlier, lower-priority sequence is the victim.
  ASSERT_GE(plans.size(), 6u);
  EXPECT_THAT(plans[5].preempted_ids, ElementsAre(1));
  EXPECT_EQ(out[1], Alone(Range(0, 4), 8));
  EXPECT_EQ(out[2], Alone(Range(50, 4), 8));
}

TEST(SchedulerTest, WaitingHigherPriorityPreemptsRunningLowerPriority) {
  for (int high_priority : {0, 5}) {
    SchedulerConfig c = SmallConfig();
    c.num_blocks = 5;
    c.eos_token_ids.clear();
    c.policy = SchedulingPolicy::kPriority;
    auto s = Make(c);
    ASSERT_TRUE(s->AddRequest(Req(1, Range(0, 12), 4, /*priority=*/5)).ok());
    StepWith(*s, 7);
    StepWith(*s, 7);  // Sequence 1 now holds all 4 blocks.
    EXPECT_EQ(s->stats().num_free_blocks, 0);
    ASSERT_TRUE(s->AddRequest(Req(2, Range(100, 4), 2, high_priority)).ok());
    StepPlan p = s->Schedule();
    if (high_priority == 0) {
      EXPECT_THAT(p.preempted_ids, ElementsAre(1));
      ASSERT_EQ(p.new_seqs.size(), 1u);
      EXPECT_EQ(p.new_seqs[0].seq_id, 2);
      EXPECT_EQ(s->GetSequence(1)->status, SequenceStatus::kWaiting);
      EXPECT_EQ(s->GetSequence(1)->num_output_tokens(), 2);  // Kept for the recompute.
    } else {  // Equal priority never preempts.
      EXPECT_THAT(p.preempted_ids, IsEmpty());
      EXPECT_THAT(p.new_seqs, IsEmpty());
      ASSERT_EQ(p.cached_seqs.size(), 1u);
      EXPECT_EQ(p.cached_seqs[0].seq_id, 1);
    }
  }
}

TEST(SchedulerTest, AbortFreesBlocksImmediately) {
  SchedulerConfig c = SmallConfig();
  c.max_num_batched_tokens = 32;
  auto s = Make(c);
  ASSERT_TRUE(s->AddRequest(Req(1, Range(0, 10))).ok());
  ASSERT_TRUE(s->AddRequest(Req(2, Range(20, 10))).ok());
  StepPlan p = s->Schedule();
  EXPECT_EQ(s->stats().num_free_blocks, 4);
  // Aborted while its step is in flight: blocks back now, its result ignored.
  ASSERT_TRUE(s->Abort(1).ok());
  EXPECT_EQ(s->stats().num_free_blocks, 7);
  EXPECT_EQ(s->kv_cache_manager().BlockTable(1).size(), 0u);
  std::vector<SeqEvent> events = MustUpdate(*s, Answer(p, [](SeqId) { return 5; }));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].seq_id, 2);
  p = s->Schedule();
  EXPECT_THAT(p.finished_ids, ElementsAre(1));
  MustUpdate(*s, Answer(p, [](SeqId) { return 5; }));

  // An id reused while the step of its previous owner runs gets nothing of that step.
  p = s->Schedule();
  ASSERT_TRUE(s->Abort(2).ok());
  ASSERT_TRUE(s->AddRequest(Req(2, Range(60, 4))).ok());
  EXPECT_TRUE(s->Update(Answer(p, [](SeqId) { return 5; })).ok());
  EXPECT_EQ(s->GetSequence(2)->num_output_tokens(), 0);
  EXPECT_EQ(s->GetSequence(2)->num_computed_tokens, 0);
  p = s->Schedule();
  EXPECT_THAT(p.finished_ids, ElementsAre(2));
  ASSERT_EQ(p.new_seqs.size(), 1u);
  EXPECT_THAT(p.new_seqs[0].token_ids, ElementsAre(60, 61, 62, 63));
  MustUpdate(*s, Answer(p, [](SeqId) { return 5; }));

  // A waiting sequence was never sent: nothing for the workers to drop.
  ASSERT_TRUE(s->AddRequest(Req(3, Range(40, 4))).ok());
  ASSERT_TRUE(s->Abort(3).ok());
  EXPECT_EQ(s->stats().num_waiting, 0);
  EXPECT_EQ(s->Abort(3).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(s->Abort(2).ok());
  EXPECT_EQ(s->stats().num_free_blocks, 10);
  p = s->Schedule();
  EXPECT_THAT(p.finished_ids, ElementsAre(2));
  MustUpdate(*s, Answer(p, [](SeqId) { return 5; }));
  EXPECT_FALSE(s->HasWork());
}

struct StopCase {
  const char* name;
  RequestOptions options;
  std::vector<int32_t> tokens;  // Sampled one per step.
  int expected_outputs;
  FinishReason expected_reason;
};

TEST(SchedulerTest, StopConditions) {
  auto opts = [](int max_new, int min_new, bool ignore_eos, std::vector<int32_t> stop) {
    RequestOptions o;
    o.max_new_tokens = max_new;
    o.min_new_tokens = min_new;
    o.ignore_eos = ignore_eos;
    o.stop_token_ids = std::move(stop);
    return o;
  };
  const std::vector<StopCase> cases = {
      {"eos", opts(8, 0, false, {}), {5, 2, 5}, 2, FinishReason::kEos},
      {"min_new_tokens delays eos", opts(8, 3, false, {}), {2, 2, 2}, 3, FinishReason::kEos},
      {"ignore_eos", opts(3, 0, true, {}), {2, 2, 2}, 3, FinishReason::kLength},
      {"stop token", opts(8, 0, false, {9}), {5, 9}, 2, FinishReason::kStop},
      {"min_new_tokens delays stop", opts(8, 2, false, {9}), {9, 9}, 2, FinishReason::kStop},
      {"max_new_tokens", opts(3, 0, false, {}), {5, 6, 7}, 3, FinishReason::kLength},
  };
  for (const StopCase& tc : cases) {
    SCOPED_TRACE(tc.name);
    auto s = Make(SmallConfig());
    Request r = Req(1, Range(10, 3));
    r.options = tc.options;
    ASSERT_TRUE(s->AddRequest(r).ok());
    std::optional<FinishReason> reason;
    int num_outputs = 0;
    for (size_t i = 0; i < tc.tokens.size() && !reason.has_value(); ++i) {
      for (const SeqEvent& e : StepWith(*s, tc.tokens[i])) {
        ++num_outputs;
        reason = e.finish_reason;
      }
    }
    EXPECT_EQ(num_outputs, tc.expected_outputs);
    EXPECT_EQ(reason, tc.expected_reason);
    EXPECT_EQ(s->stats().num_free_blocks, 10);
  }
}

TEST(SchedulerTest, MaxModelLenEndsWithLength) {
  SchedulerConfig c = SmallConfig();
  c.max_model_len = 6;
  auto s = Make(c);
  ASSERT_TRUE(s->AddRequest(Req(1, Range(10, 4), 10)).ok());
  StepWith(*s, 5);
  std::vector<SeqEvent> events = StepWith(*s, 5);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].finish_reason, FinishReason::kLength);
  EXPECT_EQ(events[0].num_output_tokens, 2);
  EXPECT_FALSE(s->AddRequest(Req(2, Range(10, 6))).ok());
}

TEST(SchedulerTest, FinishFromTheApiLayerFreesAndTellsWorkers) {
  auto s = Make(SmallConfig());
  ASSERT_TRUE(s->AddRequest(Req(1, Range(10, 4))).ok());
  StepWith(*s, 5);
  ASSERT_TRUE(s->Finish(1, FinishReason::kStop).ok());  // E.g. a stop string matched.
  EXPECT_EQ(s->stats().num_free_blocks, 10);
  EXPECT_EQ(s->GetSequence(1), nullptr);
  StepPlan p = s->Schedule();
  EXPECT_THAT(p.finished_ids, ElementsAre(1));
  EXPECT_EQ(p.num_scheduled_seqs(), 0);
}

TEST(SchedulerTest, RejectsBadRequestsAndConfigs) {
  auto s = Make(SmallConfig());  // 10 usable blocks of 4: 40 KV tokens.
  ASSERT_TRUE(s->AddRequest(Req(1, Range(0, 30), 11)).ok());
  EXPECT_EQ(s->AddRequest(Req(1, Range(0, 3))).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(s->AddRequest(Req(2, {})).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->AddRequest(Req(3, {1, -4})).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->AddRequest(Req(4, Range(0, 3), 0)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->AddRequest(Req(5, Range(0, 30), 12)).code(), absl::StatusCode::kInvalidArgument);

  SchedulerConfig c = SmallConfig();
  c.num_blocks = 1;
  EXPECT_FALSE(Scheduler::Create(c).ok());
  c = SmallConfig();
  c.max_num_batched_tokens = 2;
  EXPECT_FALSE(Scheduler::Create(c).ok());
}

TEST(SchedulerTest, UpdateRejectsResultsThatDoNotMatchThePlan) {
  auto s = Make(SmallConfig());
  EXPECT_EQ(s->Update({}).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(s->AddRequest(Req(1, Range(10, 4))).ok());
  ASSERT_TRUE(s->AddRequest(Req(2, Range(20, 4))).ok());
  StepPlan p = s->Schedule();
  EXPECT_FALSE(s->Update({p.step_id, {{1, 5}}}).ok());                  // 2 is missing.
  EXPECT_FALSE(s->Update({p.step_id, {{1, 5}, {2, 5}, {3, 5}}}).ok());  // 3 is not in it.
  EXPECT_FALSE(s->Update({p.step_id + 1, {{1, 5}, {2, 5}}}).ok());
  EXPECT_FALSE(s->Update({p.step_id, {{1, 5}, {1, 6}}}).ok());
  EXPECT_EQ(s->GetSequence(1)->num_computed_tokens, 0);  // Nothing applied.
  EXPECT_EQ(MustUpdate(*s, {p.step_id, {{2, 6}, {1, 5}}}).size(), 2u);
  EXPECT_THAT(s->GetSequence(2)->token_ids, ElementsAre(20, 21, 22, 23, 6));
}

TEST(SchedulerTest, FailedStepFailsItsSequences) {
  auto s = Make(SmallConfig());
  ASSERT_TRUE(s->AddRequest(Req(1, Range(10, 4))).ok());
  s->Schedule();
  std::vector<SeqEvent> events = s->FailStep();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].finish_reason, FinishReason::kError);
  EXPECT_EQ(s->stats().num_free_blocks, 10);
  EXPECT_THAT(s->Schedule().finished_ids, ElementsAre(1));
}

TEST(SchedulerTest, ReportsCachedPromptTokens) {
  auto s = Make(SmallConfig());
  ASSERT_TRUE(s->AddRequest(Req(1, Range(0, 10), 1)).ok());
  std::vector<SeqEvent> first = StepWith(*s, 5);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].num_cached_tokens, 0);
  ASSERT_TRUE(s->AddRequest(Req(2, Range(0, 10), 1)).ok());
  std::vector<SeqEvent> second = StepWith(*s, 5);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].num_cached_tokens, 8);  // Two full blocks; token 9 recomputed.
  EXPECT_EQ(s->stats().prefix_cache_queried_tokens, 20);
  EXPECT_EQ(s->stats().prefix_cache_hit_tokens, 8);
}

}  // namespace
}  // namespace tessera::sched
