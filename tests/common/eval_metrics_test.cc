#include "common/eval_metrics.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(ScorePositionTest, UniformLogitsGiveLogVocab) {
  std::vector<float> logits(8, 3.0f);
  auto score = ScorePosition(logits, 5);
  ASSERT_TRUE(score.ok()) << score.status();
  EXPECT_NEAR(score->nll, std::log(8.0), 1e-12);
}

TEST(ScorePositionTest, ArgmaxAndNllMatchHandComputation) {
  std::vector<float> logits = {1.0f, 4.0f, 2.0f};
  auto score = ScorePosition(logits, 2);
  ASSERT_TRUE(score.ok()) << score.status();
  EXPECT_EQ(score->argmax, 1);
  const double z = std::exp(1.0) + std::exp(4.0) + std::exp(2.0);
  EXPECT_NEAR(score->nll, std::log(z) - 2.0, 1e-12);
}

TEST(ScorePositionTest, RejectsBadInput) {
  std::vector<float> logits = {1.0f, 2.0f};
  EXPECT_FALSE(ScorePosition(logits, 2).ok());
  EXPECT_FALSE(ScorePosition(logits, -1).ok());
  EXPECT_FALSE(ScorePosition({}, 0).ok());
  std::vector<float> bad = {1.0f, NAN};
  EXPECT_FALSE(ScorePosition(bad, 0).ok());
}

TEST(CompareScoresTest, IdenticalScoresAgreeFully) {
  std::vector<PositionScore> s = {{1, 0.5}, {2, 1.5}};
  auto m = CompareScores(s, s);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->positions, 2);
  EXPECT_DOUBLE_EQ(m->top1_agreement, 1.0);
  EXPECT_DOUBLE_EQ(m->baseline_perplexity, std::exp(1.0));
  EXPECT_DOUBLE_EQ(m->candidate_perplexity, m->baseline_perplexity);
  EXPECT_DOUBLE_EQ(m->ppl_increase, 0.0);
}

TEST(CompareScoresTest, CountsDisagreementAndPerplexityIncrease) {
  std::vector<PositionScore> base = {{1, 1.0}, {2, 1.0}};
  std::vector<PositionScore> cand = {{1, 2.0}, {3, 2.0}};
  auto m = CompareScores(base, cand);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_DOUBLE_EQ(m->top1_agreement, 0.5);
  EXPECT_NEAR(m->ppl_increase, std::exp(1.0) - 1.0, 1e-12);
}

TEST(CompareScoresTest, RejectsMismatchedOrEmpty) {
  std::vector<PositionScore> one = {{0, 1.0}};
  EXPECT_FALSE(CompareScores(one, {}).ok());
  EXPECT_FALSE(CompareScores({}, {}).ok());
}

TEST(KlDivergenceTest, ZeroForTheSameDistributionAndTheClosedFormOtherwise) {
  const std::vector<float> base = {1.0f, 3.0f, -2.0f};
  std::vector<float> log_probs(3);
  LogSoftmax(base, absl::MakeSpan(log_probs));
  double total = 0;
  for (float lp : log_probs) total += std::exp(double{lp});
  EXPECT_NEAR(total, 1.0, 1e-6);
  EXPECT_EQ(KlDivergence(log_probs, base), 0.0);  // Exactly: an identical candidate scores 0.
  // A shift of every logit is the same distribution.
  EXPECT_NEAR(KlDivergence(log_probs, std::vector<float>{11.0f, 13.0f, 8.0f}), 0.0, 1e-6);
  // Two tokens: P = (0.5, 0.5), Q = softmax(0, ln 3) = (0.25, 0.75).
  std::vector<float> half(2);
  LogSoftmax(std::vector<float>{0.0f, 0.0f}, absl::MakeSpan(half));
  const double expected = 0.5 * std::log(0.5 / 0.25) + 0.5 * std::log(0.5 / 0.75);
  EXPECT_NEAR(KlDivergence(half, std::vector<float>{0.0f, std::log(3.0f)}), expected, 1e-6);
}

TEST(KlDivergenceTest, SummaryPercentilesByNearestRank) {
  std::vector<double> klds;
  for (int i = 1; i <= 200; ++i) klds.push_back(i);  // Shuffled order must not matter.
  std::swap(klds[0], klds[150]);
  const DivergenceSummary s = SummarizeDivergences(klds);
  EXPECT_DOUBLE_EQ(s.mean, 100.5);
  EXPECT_DOUBLE_EQ(s.median, 100);
  EXPECT_DOUBLE_EQ(s.p99, 198);
  EXPECT_DOUBLE_EQ(s.max, 200);
  EXPECT_DOUBLE_EQ(SummarizeDivergences({}).mean, 0.0);
}

}  // namespace
}  // namespace tessera
