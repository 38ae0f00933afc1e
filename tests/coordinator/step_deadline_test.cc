#include "coordinator/cluster/step_deadline.h"

#include <chrono>

#include "gtest/gtest.h"

namespace tessera {
namespace {

using std::chrono::milliseconds;

TEST(StepDeadlineTest, TheFixedCeilingHoldsUntilEnoughStepsWereSeen) {
  StepDeadline d(milliseconds(5000), milliseconds(120000));
  for (int i = 0; i + 1 < StepDeadline::kWarmupSteps; ++i) {
    d.Observe(1, milliseconds(10));
    EXPECT_EQ(d.For(1), milliseconds(120000)) << "after " << i + 1 << " steps";
  }
  d.Observe(1, milliseconds(10));
  EXPECT_EQ(d.For(1), milliseconds(5000)) << "10 x 10 ms is under the floor";
}

TEST(StepDeadlineTest, ScalesWithTheStepsTokensAtTheCostliestRateSeen) {
  StepDeadline d(milliseconds(5000), milliseconds(120000));
  for (int i = 0; i < StepDeadline::kWarmupSteps; ++i) d.Observe(512, milliseconds(1024));  // 2 ms a token.
  d.Observe(1, milliseconds(20));                                                            // 20 ms a token.
  // 400 tokens: 10 x 400 x 20 ms = 80 s.
  EXPECT_EQ(d.For(400), milliseconds(80000));
  // 32 tokens: 6.4 s.
  EXPECT_EQ(d.For(32), milliseconds(6400));
  // 512 tokens: 102.4 s; zero tokens counts as one (the floor).
  EXPECT_EQ(d.For(512), milliseconds(102400));
  EXPECT_EQ(d.For(0), milliseconds(5000));
}

TEST(StepDeadlineTest, AStepBiggerThanAnySeenGetsTheCeiling) {
  StepDeadline d(milliseconds(5000), milliseconds(120000));
  for (int i = 0; i < StepDeadline::kWarmupSteps; ++i) d.Observe(256, milliseconds(100));  // Batch decode.
  EXPECT_EQ(d.For(256), milliseconds(5000));
  // A 2,048-token prefill costs more per token than these steps measured: not guessed.
  EXPECT_EQ(d.For(2048), milliseconds(120000));
}

TEST(StepDeadlineTest, ASpellOfSlowStepsStopsCountingOnceItLeavesTheWindow) {
  StepDeadline d(milliseconds(1000), milliseconds(60000));
  for (int i = 0; i < StepDeadline::kWarmupSteps; ++i) d.Observe(4, milliseconds(4));  // 1 ms a token.
  EXPECT_EQ(d.For(4), milliseconds(1000));
  d.Observe(4, milliseconds(400));  // A slow step (a lossy link): 100 ms a token.
  EXPECT_EQ(d.For(4), milliseconds(4000));
  for (int i = 0; i + 1 < StepDeadline::kWindow; ++i) d.Observe(4, milliseconds(4));
  EXPECT_EQ(d.For(4), milliseconds(4000)) << "still in the window";
  d.Observe(4, milliseconds(4));
  EXPECT_EQ(d.For(4), milliseconds(1000)) << "out of the window";
}

}  // namespace
}  // namespace tessera
