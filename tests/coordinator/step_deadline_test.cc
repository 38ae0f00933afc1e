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
  for (int i = 0; i < StepDeadline::kWarmupSteps; ++i) d.Observe(32, milliseconds(64));  // 2 ms a token.
  d.Observe(1, milliseconds(20));                                                          // 20 ms a token.
  // A 2,048-token prefill gets 10 x 2,048 x 20 ms, capped by the ceiling.
  EXPECT_EQ(d.For(2048), milliseconds(120000));
  // 400 tokens: 10 x 400 x 20 ms = 80 s.
  EXPECT_EQ(d.For(400), milliseconds(80000));
  // A decode step of 32: 6.4 s.
  EXPECT_EQ(d.For(32), milliseconds(6400));
  // Zero tokens counts as one.
  EXPECT_EQ(d.For(0), milliseconds(5000));
}

TEST(StepDeadlineTest, ASlowStepRaisesTheDeadlineAndNeverLowersIt) {
  StepDeadline d(milliseconds(1000), milliseconds(60000));
  for (int i = 0; i < StepDeadline::kWarmupSteps; ++i) d.Observe(4, milliseconds(40));  // 10 ms a token.
  EXPECT_EQ(d.For(100), milliseconds(10000));
  d.Observe(4, milliseconds(400));  // A slow step: 100 ms a token.
  EXPECT_EQ(d.For(10), milliseconds(10000));
  d.Observe(4, milliseconds(4));  // A fast one afterwards changes nothing.
  EXPECT_EQ(d.For(10), milliseconds(10000));
}

}  // namespace
}  // namespace tessera
