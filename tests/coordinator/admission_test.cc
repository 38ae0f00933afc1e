// Overload bounds of the scheduler: a bounded waiting queue (sequences and queued prompt
// tokens) that refuses at once, and priority aging that bounds how long a low priority
// waits under a steady stream of higher ones.

#include <numeric>
#include <vector>

#include "coordinator/scheduler/scheduler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::sched {
namespace {

std::vector<int32_t> Range(int32_t first, int n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

Request Req(SeqId id, std::vector<int32_t> prompt, int max_new_tokens, int priority = 0) {
  Request r;
  r.seq_id = id;
  r.prompt_token_ids = std::move(prompt);
  r.options.max_new_tokens = max_new_tokens;
  r.options.priority = priority;
  return r;
}

SchedulerConfig OneSeatConfig() {
  SchedulerConfig c;
  c.num_blocks = 33;
  c.block_size = 4;
  c.max_num_batched_tokens = 16;
  c.max_num_seqs = 1;  // One sequence runs at a time: the rest wait, in rank order.
  return c;
}

// Runs one step, answering token 7 for every sampled sequence; returns the ids that
// finished in it.
std::vector<SeqId> Step(Scheduler& s) {
  StepPlan plan = s.Schedule();
  StepResult r;
  r.step_id = plan.step_id;
  for (const auto& d : plan.new_seqs) if (d.samples_token) r.sampled.push_back({d.seq_id, 7});
  for (const auto& d : plan.cached_seqs) if (d.samples_token) r.sampled.push_back({d.seq_id, 7});
  auto events = s.Update(r);
  EXPECT_TRUE(events.ok()) << events.status();
  std::vector<SeqId> done;
  for (const SeqEvent& e : *events) if (e.finish_reason.has_value()) done.push_back(e.seq_id);
  return done;
}

TEST(AdmissionTest, FullQueueRefusesAtOnceAndAdmitsAgainWhenItDrains) {
  SchedulerConfig c = OneSeatConfig();
  c.max_num_waiting = 2;
  auto s = Scheduler::Create(c);
  ASSERT_TRUE(s.ok());
  Scheduler& sched = **s;
  ASSERT_TRUE(sched.AddRequest(Req(1, Range(10, 4), 1)).ok());
  ASSERT_TRUE(sched.AddRequest(Req(2, Range(20, 4), 1)).ok());
  const absl::Status full = sched.AddRequest(Req(3, Range(30, 4), 1));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(full.message()), ::testing::HasSubstr("2 requests waiting, the limit is 2"));
  EXPECT_EQ(sched.GetSequence(3), nullptr) << "a refused request leaves no trace";
  EXPECT_THAT(Step(sched), ::testing::ElementsAre(1));  // 1 ran; 2 still waits.
  EXPECT_TRUE(sched.AddRequest(Req(3, Range(30, 4), 1)).ok());
  EXPECT_EQ(sched.stats().num_waiting, 2);
}

TEST(AdmissionTest, QueuedPromptTokensAreBudgeted) {
  SchedulerConfig c = OneSeatConfig();
  c.max_num_waiting_tokens = 10;
  auto s = Scheduler::Create(c);
  ASSERT_TRUE(s.ok());
  Scheduler& sched = **s;
  ASSERT_TRUE(sched.AddRequest(Req(1, Range(10, 6), 1)).ok());
  const absl::Status full = sched.AddRequest(Req(2, Range(20, 5), 1));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(full.message()), ::testing::HasSubstr("6 queued prompt tokens + 5"));
  ASSERT_TRUE(sched.AddRequest(Req(3, Range(30, 4), 1)).ok());  // 6 + 4 fits exactly.
  EXPECT_EQ(sched.num_queued_tokens(), 10);
  // Leaving the queue (scheduled or aborted) gives the budget back.
  ASSERT_TRUE(sched.Abort(3).ok());
  EXPECT_EQ(sched.num_queued_tokens(), 6);
  Step(sched);
  EXPECT_EQ(sched.num_queued_tokens(), 0);
  EXPECT_TRUE(sched.AddRequest(Req(2, Range(20, 5), 1)).ok());
}

TEST(AdmissionTest, NegativeBoundsAreRejected) {
  SchedulerConfig c = OneSeatConfig();
  c.max_num_waiting = -1;
  EXPECT_EQ(Scheduler::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
  c = OneSeatConfig();
  c.priority_aging_arrivals = -3;
  EXPECT_EQ(Scheduler::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
}

// Order in which sequences finish when one low-priority request (id 100, priority 1)
// arrives first and then high-priority ones (priority 0) keep arriving, one per step.
std::vector<SeqId> FinishOrder(int aging) {
  SchedulerConfig c = OneSeatConfig();
  c.policy = SchedulingPolicy::kPriority;
  c.priority_aging_arrivals = aging;
  auto s = Scheduler::Create(c);
  EXPECT_TRUE(s.ok());
  Scheduler& sched = **s;
  // A high-priority request holds the seat while the low one arrives.
  EXPECT_TRUE(sched.AddRequest(Req(1, Range(10, 4), 1, /*priority=*/0)).ok());
  EXPECT_TRUE(sched.AddRequest(Req(100, Range(50, 4), 1, /*priority=*/1)).ok());
  std::vector<SeqId> order;
  for (SeqId next = 2; next <= 12; ++next) {
    EXPECT_TRUE(sched.AddRequest(Req(next, Range(10 * next, 4), 1, /*priority=*/0)).ok());
    for (SeqId id : Step(sched)) order.push_back(id);
  }
  while (sched.HasWork()) {
    for (SeqId id : Step(sched)) order.push_back(id);
  }
  return order;
}

TEST(AdmissionTest, StrictPriorityLetsTheLowPriorityWaitBehindEveryHighOne) {
  const std::vector<SeqId> order = FinishOrder(/*aging=*/0);
  ASSERT_EQ(order.size(), 13u);
  EXPECT_EQ(order.back(), 100) << "starved until the high-priority stream stopped";
}

TEST(AdmissionTest, AgingBoundsHowManyLaterArrivalsPassALowPriority) {
  // Arrivals: 1 (#0), 100 (#1, priority 1), then 2, 3, ... (#2, #3, ...). With aging 3,
  // 100's key is 1 * 3 + 1 = 4: only sequences with key < 4 (arrivals #2 and #3, i.e. ids
  // 2 and 3) rank before it; 4 (key 4) ties and loses on arrival.
  const std::vector<SeqId> order = FinishOrder(/*aging=*/3);
  ASSERT_EQ(order.size(), 13u);
  EXPECT_THAT(std::vector<SeqId>(order.begin(), order.begin() + 5), ::testing::ElementsAre(1, 2, 3, 100, 4));
}

}  // namespace
}  // namespace tessera::sched
