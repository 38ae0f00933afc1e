// The scheduler's side of speculative decoding: lookahead slots for decoding sequences,
// counted in the token budget and the blocks, and step results of several tokens.
#include <memory>
#include <vector>

#include "coordinator/scheduler/scheduler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/scheduler_test_util.h"

namespace tessera::sched {
namespace {

using testing::Make;
using testing::MustUpdate;
using testing::Range;

using ::testing::ElementsAre;

SchedulerConfig Config(int k) {
  SchedulerConfig c;
  c.num_blocks = 11;
  c.block_size = 4;
  c.max_num_batched_tokens = 16;
  c.max_num_seqs = 4;
  c.eos_token_ids = {2};
  c.num_speculative_tokens = k;
  return c;
}

Request Req(SeqId id, int prompt_len, int max_new_tokens) {
  Request r;
  r.seq_id = id;
  r.prompt_token_ids = Range(100, prompt_len);
  r.options.max_new_tokens = max_new_tokens;
  return r;
}

StepResult Tokens(const StepPlan& plan, SeqId id, const std::vector<int32_t>& tokens) {
  StepResult r;
  r.step_id = plan.step_id;
  for (int32_t t : tokens) r.sampled.push_back({id, t});
  return r;
}

TEST(SchedulerSpeculationTest, DecodeStepsReserveLookaheadInBudgetAndBlocks) {
  auto s = Make(Config(3));
  ASSERT_TRUE(s->AddRequest(Req(1, 4, 20)).ok());
  StepPlan p = s->Schedule();  // Prefill: no lookahead.
  ASSERT_EQ(p.new_seqs.size(), 1u);
  EXPECT_EQ(p.new_seqs[0].num_lookahead_tokens, 0);
  EXPECT_THAT(p.new_seqs[0].block_ids, ElementsAre(1));
  MustUpdate(*s, Tokens(p, 1, {7}));

  p = s->Schedule();  // Decode of token 7 at position 4, plus 3 slots: positions 4..7.
  ASSERT_EQ(p.cached_seqs.size(), 1u);
  EXPECT_EQ(p.cached_seqs[0].num_scheduled_tokens, 1);
  EXPECT_EQ(p.cached_seqs[0].num_lookahead_tokens, 3);
  EXPECT_THAT(p.cached_seqs[0].new_block_ids, ElementsAre(2));
  EXPECT_EQ(p.total_num_scheduled_tokens, 4);
  EXPECT_EQ(s->stats().num_lookahead_slots, 3);

  // Two proposals accepted and the target's own token: three tokens, and the KV of 7 and
  // the two accepted ones is computed.
  const auto events = MustUpdate(*s, Tokens(p, 1, {8, 9, 10}));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_THAT(events[0].new_token_ids, ElementsAre(8, 9, 10));
  EXPECT_EQ(events[0].num_output_tokens, 4);
  const Sequence* seq = s->GetSequence(1);
  EXPECT_EQ(seq->num_tokens(), 8);
  EXPECT_EQ(seq->num_computed_tokens, 7);

  p = s->Schedule();  // Token 10 at position 7; the workers hear of 8, 9 and 10.
  ASSERT_EQ(p.cached_seqs.size(), 1u);
  EXPECT_THAT(p.cached_seqs[0].new_token_ids, ElementsAre(8, 9, 10));
  EXPECT_EQ(p.cached_seqs[0].num_computed_tokens, 7);
  EXPECT_EQ(p.cached_seqs[0].num_lookahead_tokens, 3);
  EXPECT_THAT(p.cached_seqs[0].new_block_ids, ElementsAre(3));  // Positions 8..10.
}

TEST(SchedulerSpeculationTest, LookaheadNeverPassesMaxNewTokensOrTheBudget) {
  SchedulerConfig c = Config(5);
  c.max_num_batched_tokens = 8;
  auto s = Make(c);
  ASSERT_TRUE(s->AddRequest(Req(1, 4, 3)).ok());
  StepPlan p = s->Schedule();
  MustUpdate(*s, Tokens(p, 1, {7}));
  p = s->Schedule();
  // One token out, two to go: one verified token plus one proposal at most.
  EXPECT_EQ(p.cached_seqs[0].num_lookahead_tokens, 1);
  const auto events = MustUpdate(*s, Tokens(p, 1, {8, 9}));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].finish_reason, FinishReason::kLength);
  EXPECT_THAT(events[0].new_token_ids, ElementsAre(8, 9));

  // Four decoding sequences share a budget of 8: 1 + lookahead each, first come first.
  auto t = Make(c);
  for (SeqId id = 1; id <= 4; ++id) ASSERT_TRUE(t->AddRequest(Req(id, 1, 12)).ok());
  p = t->Schedule();
  StepResult r;
  r.step_id = p.step_id;
  for (const auto& d : p.new_seqs) r.sampled.push_back({d.seq_id, 7});
  MustUpdate(*t, r);
  p = t->Schedule();
  ASSERT_EQ(p.cached_seqs.size(), 4u);
  EXPECT_EQ(p.cached_seqs[0].num_lookahead_tokens, 4);  // 8 - 1 for itself - 3 for the rest.
  EXPECT_EQ(p.total_num_scheduled_tokens, 8);
}

TEST(SchedulerSpeculationTest, TokensAfterAStopAreDropped) {
  auto s = Make(Config(4));
  ASSERT_TRUE(s->AddRequest(Req(1, 4, 20)).ok());
  StepPlan p = s->Schedule();
  MustUpdate(*s, Tokens(p, 1, {7}));
  p = s->Schedule();
  const auto events = MustUpdate(*s, Tokens(p, 1, {8, 2, 9, 10}));  // 2 is EOS.
  ASSERT_EQ(events.size(), 1u);
  EXPECT_THAT(events[0].new_token_ids, ElementsAre(8, 2));
  EXPECT_EQ(events[0].finish_reason, FinishReason::kEos);
  EXPECT_EQ(s->stats().num_free_blocks, s->stats().num_usable_blocks);
}

TEST(SchedulerSpeculationTest, ShortOfBlocksADecodeDropsItsLookaheadInsteadOfPreempting) {
  SchedulerConfig c = Config(3);
  c.num_blocks = 4;  // Three usable blocks of 4 tokens.
  auto s = Make(c);
  ASSERT_TRUE(s->AddRequest(Req(1, 4, 8)).ok());
  ASSERT_TRUE(s->AddRequest(Req(2, 3, 8)).ok());
  StepPlan p = s->Schedule();  // Both prefill: blocks 1 and 2.
  StepResult r;
  r.step_id = p.step_id;
  r.sampled = {{1, 7}, {2, 7}};
  MustUpdate(*s, r);
  p = s->Schedule();
  // Sequence 1 decodes at position 4 and takes the last block for it and 3 slots;
  // sequence 2 (position 3, in its block) has no block left for lookahead.
  ASSERT_EQ(p.cached_seqs.size(), 2u);
  EXPECT_TRUE(p.preempted_ids.empty());
  EXPECT_EQ(p.cached_seqs[0].num_lookahead_tokens, 3);
  EXPECT_EQ(p.cached_seqs[1].num_lookahead_tokens, 0);
}

TEST(SchedulerSpeculationTest, RefusesMoreTokensThanTheSlots) {
  auto s = Make(Config(2));
  ASSERT_TRUE(s->AddRequest(Req(1, 4, 20)).ok());
  StepPlan p = s->Schedule();
  // A prefill step has no lookahead: two tokens are one too many.
  EXPECT_FALSE(s->Update(Tokens(p, 1, {7, 8})).ok());
  MustUpdate(*s, Tokens(p, 1, {7}));
  p = s->Schedule();
  EXPECT_FALSE(s->Update(Tokens(p, 1, {8, 9, 10, 11})).ok());
  EXPECT_EQ(MustUpdate(*s, Tokens(p, 1, {8, 9, 10}))[0].new_token_ids.size(), 3u);
}

TEST(SchedulerSpeculationTest, RejectsANegativeLookahead) {
  SchedulerConfig c = Config(-1);
  EXPECT_FALSE(Scheduler::Create(c).ok());
}

}  // namespace
}  // namespace tessera::sched
