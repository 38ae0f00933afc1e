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
  c.kld.mean = 0.0005;
  c.top1_agreement = 0.98;
  c.baseline_perplexity = 4.0;
  c.candidate_perplexity = 4.12;
  c.ppl_increase = 0.03;
  // By default only the mean KL divergence gates.
  EXPECT_TRUE(ThresholdFailures(c, Thresholds{}).empty());
  c.kld.mean = 0.002;
  const std::vector<std::string> failures = ThresholdFailures(c, Thresholds{1e-3, 0.99, 0.02});
  ASSERT_EQ(failures.size(), 3u);
  EXPECT_NE(failures[0].find("mean KL divergence 0.00200 is above --max-mean-kld 0.00100"), std::string::npos)
      << failures[0];
  EXPECT_NE(failures[1].find("top-1"), std::string::npos);
  EXPECT_NE(failures[2].find("perplexity"), std::string::npos);
  EXPECT_TRUE(ThresholdFailures(c, Thresholds{0.01, 0.9, 0.05}).empty());
}

TEST(EvalGateTest, LlamaCppChunksScoreTheSecondHalfOfWholeChunks) {
  const std::vector<Window> w = MakeLlamaCppChunks(1100, 512, 0);
  ASSERT_EQ(w.size(), 2u);  // The 76-token tail is dropped, as llama-perplexity drops it.
  EXPECT_EQ(w[1].begin, 512u);
  EXPECT_EQ(w[1].first_scored, 256u);
  EXPECT_EQ(ScoredPositions(w), 2u * 255u);
  EXPECT_EQ(MakeLlamaCppChunks(1100, 512, 300).size(), 1u);
  EXPECT_TRUE(MakeLlamaCppChunks(1100, 512, 100).empty());  // Not even one whole chunk.
  EXPECT_TRUE(MakeLlamaCppChunks(500, 512, 0).empty());
}

TEST(EvalGateTest, MaxAbsDiff) {
  EXPECT_EQ(MaxAbsDiff(std::vector<float>{}, std::vector<float>{}), 0.0);
  EXPECT_FLOAT_EQ(MaxAbsDiff(std::vector<float>{1, -2, 3}, std::vector<float>{1, 2, 2.5}), 4.0);
}

TEST(EvalGateTest, DefaultGatesComeFromLlamaCppsFormats) {
  EXPECT_DOUBLE_EQ(DefaultThresholds("int8").max_mean_kld, 1.5 * kPeerQ8_0MeanKld);
  EXPECT_DOUBLE_EQ(DefaultThresholds("fp8").max_mean_kld, kPeerQ4KMMeanKld);
  for (const char* f : {"gptq", "awq"}) EXPECT_DOUBLE_EQ(DefaultThresholds(f).max_mean_kld, 2 * kPeerQ4KMMeanKld) << f;
  for (const char* f : {"none", "gguf"}) EXPECT_DOUBLE_EQ(DefaultThresholds(f).max_mean_kld, 1e-3) << f;
  // A rounded KV cache adds its own budget.
  EXPECT_DOUBLE_EQ(DefaultThresholds("none", "fp8").max_mean_kld, 1e-3 + kPeerQ4KMMeanKld);
  EXPECT_DOUBLE_EQ(DefaultThresholds("int8", "bf16").max_mean_kld, 3 * kPeerQ8_0MeanKld);
  EXPECT_LT(DefaultThresholds("int8").min_top1, 0);  // Reported, not gated.
  EXPECT_LT(DefaultThresholds("int8").max_ppl_increase, 0);
}

}  // namespace
}  // namespace tessera::eval
