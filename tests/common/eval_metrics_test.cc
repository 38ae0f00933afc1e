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

}  // namespace
}  // namespace tessera
