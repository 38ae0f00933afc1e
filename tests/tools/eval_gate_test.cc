// `tessera eval`'s windows, row scoring and thresholds on hand-made numbers (the
// per-position math is tested in tests/common/eval_metrics_test.cc).
#include "tools/eval/eval_gate.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tessera::eval {
namespace {

TEST(EvalGateTest, WindowsShareOneTokenSoEveryTransitionIsScoredOnce) {
  const std::vector<Window> w = MakeWindows(10, 4, 0);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0].begin, 0u);
  EXPECT_EQ(w[0].length, 4u);
  EXPECT_EQ(w[1].begin, 3u);
  EXPECT_EQ(w[1].length, 4u);
  EXPECT_EQ(w[2].begin, 6u);
  EXPECT_EQ(w[2].length, 4u);
  EXPECT_EQ(ScoredPositions(w), 9u);
}

TEST(EvalGateTest, MaxPositionsCapsTheScoredPositions) {
  const std::vector<Window> w = MakeWindows(100, 8, 10);
  EXPECT_EQ(ScoredPositions(w), 10u);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[1].length, 4u);  // 7 from the first window, 3 from the second.
}

TEST(EvalGateTest, TooFewTokensOrContextGiveNoWindows) {
  EXPECT_TRUE(MakeWindows(1, 256, 0).empty());
  EXPECT_TRUE(MakeWindows(10, 1, 0).empty());
  EXPECT_EQ(ScoredPositions(MakeWindows(2, 256, 0)), 1u);
}

TEST(EvalGateTest, ScoreRowsKeepsArgmaxAndNll) {
  const std::vector<float> logits = {0, 5, 1,   // row 0: argmax 1
                                     9, 0, 0};  // row 1: argmax 0
  std::vector<PositionScore> scores;
  ASSERT_TRUE(ScoreRows(logits, 3, std::vector<int32_t>{2, 0}, &scores).ok());
  ASSERT_EQ(scores.size(), 2u);
  EXPECT_EQ(scores[0].argmax, 1);
  EXPECT_EQ(scores[1].argmax, 0);
  EXPECT_NEAR(scores[0].nll, ScorePosition(std::vector<float>{0, 5, 1}, 2)->nll, 1e-12);
  EXPECT_FALSE(ScoreRows(logits, 3, std::vector<int32_t>{3, 0}, &scores).ok());
  EXPECT_FALSE(ScoreRows(logits, 3, std::vector<int32_t>{0, 0, 0}, &scores).ok());
}

TEST(EvalGateTest, ThresholdFailuresNameEachMissedThreshold) {
  AgreementMetrics c;
  c.top1_agreement = 0.995;
  c.baseline_perplexity = 4.0;
  c.candidate_perplexity = 4.04;
  c.ppl_increase = 0.01;
  EXPECT_TRUE(ThresholdFailures(c, Thresholds{}).empty());
  c.top1_agreement = 0.98;
  c.ppl_increase = 0.03;
  const std::vector<std::string> failures = ThresholdFailures(c, Thresholds{});
  ASSERT_EQ(failures.size(), 2u);
  EXPECT_NE(failures[0].find("top-1"), std::string::npos);
  EXPECT_NE(failures[1].find("perplexity"), std::string::npos);
  EXPECT_TRUE(ThresholdFailures(c, Thresholds{0.9, 0.05}).empty());
}

TEST(EvalGateTest, MaxAbsDiff) {
  EXPECT_EQ(MaxAbsDiff(std::vector<float>{}, std::vector<float>{}), 0.0);
  EXPECT_FLOAT_EQ(MaxAbsDiff(std::vector<float>{1, -2, 3}, std::vector<float>{1, 2, 2.5}), 4.0);
}

TEST(EvalGateTest, FourBitCandidatesGetTheLooserDefaults) {
  for (const char* f : {"none", "int8", "fp8"}) {
    EXPECT_EQ(DefaultThresholds(f).min_top1, 0.99) << f;
    EXPECT_EQ(DefaultThresholds(f).max_ppl_increase, 0.02) << f;
  }
  for (const char* f : {"gptq", "awq"}) {
    EXPECT_EQ(DefaultThresholds(f).min_top1, 0.95) << f;
    EXPECT_EQ(DefaultThresholds(f).max_ppl_increase, 0.06) << f;
  }
}

}  // namespace
}  // namespace tessera::eval
