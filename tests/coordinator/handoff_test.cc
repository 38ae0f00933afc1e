// Disaggregated prefill and decode in the scheduler: a prefill_only sequence is held after
// its first token with its blocks, and a decode replica takes it over with AddHandoff and
// HandoffDone (docs/scheduler.md, "Handoffs").
#include <vector>

#include "coordinator/scheduler/scheduler.h"
#include "gtest/gtest.h"
#include "tests/coordinator/scheduler_test_util.h"

namespace tessera::sched {
namespace {

using testing::Make;
using testing::MustUpdate;
using testing::Range;

SchedulerConfig Config() {
  SchedulerConfig c;
  c.num_blocks = 17;  // 16 usable blocks of 4 tokens.
  c.block_size = 4;
  c.max_num_batched_tokens = 64;
  c.max_num_seqs = 4;
  c.eos_token_ids = {0};
  return c;
}

Request Prompt(SeqId id, std::vector<int32_t> tokens, int max_new_tokens, bool prefill_only) {
  Request r;
  r.seq_id = id;
  r.prompt_token_ids = std::move(tokens);
  r.options.max_new_tokens = max_new_tokens;
  r.options.prefill_only = prefill_only;
  return r;
}

// Runs the prefill of `r` on `s` in one step that samples token 7; the step's events.
std::vector<SeqEvent> Prefill(Scheduler& s, Request r) {
  const SeqId id = r.seq_id;
  EXPECT_TRUE(s.AddRequest(std::move(r)).ok());
  const StepPlan plan = s.Schedule();
  EXPECT_EQ(plan.new_seqs.size(), 1u);
  return MustUpdate(s, {plan.step_id, {{id, 7}}});
}

TEST(HandoffTest, PrefillOnlySequenceIsHeldWithItsBlocks) {
  auto p = Make(Config());
  const std::vector<SeqEvent> events = Prefill(*p, Prompt(1, Range(1, 10), 8, true));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(events[0].handed_off);
  EXPECT_FALSE(events[0].finish_reason.has_value());
  EXPECT_EQ(events[0].new_token_ids, (absl::InlinedVector<int32_t, 1>{7}));
  EXPECT_EQ(p->stats().num_held, 1);
  EXPECT_EQ(p->stats().num_running, 0);
  EXPECT_EQ(p->kv_cache_manager().BlockTable(1).size(), 3u);  // 10 prompt tokens.
  EXPECT_EQ(p->stats().num_free_blocks, 13);
  // The workers drop it in the next step; its KV stays where it is.
  const StepPlan next = p->Schedule();
  EXPECT_EQ(next.finished_ids, std::vector<SeqId>{1});
  EXPECT_EQ(p->kv_cache_manager().BlockTable(1).size(), 3u);
  MustUpdate(*p, {next.step_id, {}});
  ASSERT_TRUE(p->ReleaseHeld(1).ok());
  EXPECT_EQ(p->stats().num_free_blocks, 16);
  EXPECT_EQ(p->stats().num_held, 0);
  EXPECT_FALSE(p->ReleaseHeld(1).ok());
}

TEST(HandoffTest, AFirstTokenThatStopsFinishesInsteadOfHandingOff) {
  auto p = Make(Config());
  const std::vector<SeqEvent> events = Prefill(*p, Prompt(1, Range(1, 10), 1, true));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_FALSE(events[0].handed_off);
  EXPECT_EQ(events[0].finish_reason, FinishReason::kLength);
  EXPECT_EQ(p->stats().num_held, 0);
  EXPECT_EQ(p->stats().num_free_blocks, 16);
}

TEST(HandoffTest, ResumedSequenceDecodesOnItsPrefillReplicaWithoutRecomputing) {
  auto p = Make(Config());
  Prefill(*p, Prompt(1, Range(1, 10), 8, true));
  ASSERT_TRUE(p->ResumeHeld(1).ok());
  const StepPlan plan = p->Schedule();
  ASSERT_EQ(plan.new_seqs.size(), 1u);  // The workers dropped it: it goes out whole.
  EXPECT_EQ(plan.new_seqs[0].num_computed_tokens, 10);
  EXPECT_EQ(plan.new_seqs[0].num_scheduled_tokens, 1);
  EXPECT_EQ(plan.new_seqs[0].token_ids.size(), 11u);
  const std::vector<SeqEvent> events = MustUpdate(*p, {plan.step_id, {{1, 8}}});
  ASSERT_EQ(events.size(), 1u);
  EXPECT_FALSE(events[0].handed_off);
  EXPECT_EQ(events[0].num_output_tokens, 2);
}

TEST(HandoffTest, CancellingAHeldSequenceFreesItsBlocks) {
  auto p = Make(Config());
  Prefill(*p, Prompt(1, Range(1, 10), 8, true));
  ASSERT_TRUE(p->Abort(1).ok());
  EXPECT_EQ(p->stats().num_held, 0);
  EXPECT_EQ(p->stats().num_free_blocks, 16);
}

TEST(HandoffTest, DecodeReplicaRunsTheHandoffOnceItsKvLands) {
  auto d = Make(Config());
  auto handoff = d->AddHandoff(Prompt(1, Range(1, 10), 8, false), {7});
  ASSERT_TRUE(handoff.ok()) << handoff.status();
  EXPECT_EQ(handoff->first_block, 0);
  EXPECT_EQ(handoff->block_ids.size(), 3u);
  EXPECT_EQ(d->stats().num_transferring, 1);
  EXPECT_FALSE(d->HasWork());  // Nothing runs before the KV is there.
  ASSERT_TRUE(d->HandoffDone(1, true).ok());
  const StepPlan plan = d->Schedule();
  ASSERT_EQ(plan.new_seqs.size(), 1u);
  const NewSeqData& n = plan.new_seqs[0];
  EXPECT_EQ(n.num_computed_tokens, 10);
  EXPECT_EQ(n.num_scheduled_tokens, 1);  // The first token's KV.
  EXPECT_TRUE(n.samples_token);
  EXPECT_EQ(n.token_ids.back(), 7);
  EXPECT_EQ(std::vector<BlockId>(n.block_ids.begin(), n.block_ids.begin() + 3), handoff->block_ids);
  const std::vector<SeqEvent> events = MustUpdate(*d, {plan.step_id, {{1, 9}}});
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].num_output_tokens, 2);  // The first token counts toward max_new_tokens.
}

TEST(HandoffTest, TransferredFullBlocksServeLaterPrefixesAndHitsAreNotTransferred) {
  auto d = Make(Config());
  ASSERT_TRUE(d->AddHandoff(Prompt(1, Range(1, 10), 8, false), {7}).ok());
  ASSERT_TRUE(d->HandoffDone(1, true).ok());
  // Same first 8 tokens (two full blocks): those are hits, only the rest moves.
  auto second = d->AddHandoff(Prompt(2, Range(1, 9), 8, false), {5});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->first_block, 2);
  EXPECT_EQ(second->block_ids.size(), 1u);
}

TEST(HandoffTest, FailedTransferRecomputesOnTheDecodeReplica) {
  auto d = Make(Config());
  ASSERT_TRUE(d->AddHandoff(Prompt(1, Range(1, 10), 8, false), {7}).ok());
  ASSERT_TRUE(d->HandoffDone(1, false).ok());
  EXPECT_EQ(d->stats().num_free_blocks, 16);
  EXPECT_EQ(d->stats().num_waiting, 1);
  const StepPlan plan = d->Schedule();
  ASSERT_EQ(plan.new_seqs.size(), 1u);
  EXPECT_EQ(plan.new_seqs[0].num_computed_tokens, 0);
  EXPECT_EQ(plan.new_seqs[0].num_scheduled_tokens, 11);  // Prompt and first token.
}

TEST(HandoffTest, CancelDuringTransferKeepsTheBlocksUntilItEnds) {
  auto d = Make(Config());
  ASSERT_TRUE(d->AddHandoff(Prompt(1, Range(1, 10), 8, false), {7}).ok());
  ASSERT_TRUE(d->Abort(1).ok());
  EXPECT_EQ(d->stats().num_free_blocks, 13);  // The sender may still be writing them.
  ASSERT_TRUE(d->HandoffDone(1, true).ok());
  EXPECT_EQ(d->stats().num_free_blocks, 16);
  EXPECT_EQ(d->stats().num_transferring, 0);
  EXPECT_FALSE(d->HasWork());
}

TEST(HandoffTest, HandoffsTakeSeatsAndNeedBlocks) {
  SchedulerConfig c = Config();
  c.max_num_seqs = 2;
  auto d = Make(c);
  ASSERT_TRUE(d->AddHandoff(Prompt(1, Range(100, 30), 8, false), {7}).ok());  // 8 blocks.
  ASSERT_TRUE(d->AddHandoff(Prompt(2, Range(200, 30), 8, false), {7}).ok());
  auto third = d->AddHandoff(Prompt(3, Range(300, 4), 8, false), {7});
  EXPECT_TRUE(absl::IsResourceExhausted(third.status())) << third.status();
  // A waiting request does not take a seat a transfer holds.
  ASSERT_TRUE(d->AddRequest(Prompt(4, Range(1, 2), 4, false)).ok());
  const StepPlan plan = d->Schedule();
  EXPECT_EQ(plan.num_scheduled_seqs(), 0);
  ASSERT_TRUE(d->HandoffDone(1, false).ok());
  ASSERT_TRUE(d->HandoffDone(2, false).ok());
  ASSERT_TRUE(d->Abort(1).ok());
  ASSERT_TRUE(d->Abort(2).ok());
  MustUpdate(*d, {plan.step_id, {}});
  auto big = d->AddHandoff(Prompt(5, Range(500, 70), 8, false), {7});  // 18 blocks > 16.
  EXPECT_FALSE(big.ok());
  EXPECT_EQ(d->stats().num_free_blocks, 16);
}

TEST(HandoffTest, HandoffChecksTheRequestLikeAddRequest) {
  auto d = Make(Config());
  EXPECT_TRUE(absl::IsInvalidArgument(d->AddHandoff(Prompt(1, {}, 8, false), {7}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(d->AddHandoff(Prompt(1, Range(1, 4), 8, false), {}).status()));
  ASSERT_TRUE(d->AddHandoff(Prompt(1, Range(1, 4), 8, false), {7}).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(d->AddHandoff(Prompt(1, Range(1, 4), 8, false), {7}).status()));
  EXPECT_FALSE(d->HandoffDone(2, true).ok());
}

}  // namespace
}  // namespace tessera::sched
