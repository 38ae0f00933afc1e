#include "worker/sampler.h"

#include <cmath>
#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

SamplingParams Params(float temperature) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = 42;
  p.has_seed = true;
  return p;
}

TEST(SamplerTest, GreedyTakesTheLargestLogit) {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.9f};
  EXPECT_EQ(SampleToken(logits, Params(0), {}, 0, 0).id, 1);
}

TEST(SamplerTest, TopKOneIsGreedyAtAnyTemperature) {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.9f};
  SamplingParams p = Params(5.0f);
  p.top_k = 1;
  for (uint64_t step = 0; step < 50; ++step) EXPECT_EQ(SampleToken(logits, p, {}, 0, step).id, 1);
}

TEST(SamplerTest, TopPKeepsTheSmallestNucleus) {
  // Probabilities about 0.64, 0.24, 0.09, 0.03: top_p 0.8 keeps the first two.
  const std::vector<float> logits = {3.0f, 2.0f, 1.0f, 0.0f};
  SamplingParams p = Params(1.0f);
  p.top_p = 0.8f;
  std::map<int, int> seen;
  for (uint64_t step = 0; step < 2000; ++step) ++seen[SampleToken(logits, p, {}, 0, step).id];
  EXPECT_EQ(seen.count(2), 0u);
  EXPECT_EQ(seen.count(3), 0u);
  // 0.64 / 0.88 of the kept mass.
  EXPECT_NEAR(seen[0] / 2000.0, 0.727, 0.04);
}

TEST(SamplerTest, MinPDropsUnlikelyTokens) {
  const std::vector<float> logits = {3.0f, 2.0f, 1.0f, 0.0f};
  SamplingParams p = Params(1.0f);
  p.min_p = 0.2f;  // Keeps p >= 0.2 * 0.64: tokens 0 and 1.
  for (uint64_t step = 0; step < 500; ++step) EXPECT_LE(SampleToken(logits, p, {}, 0, step).id, 1);
}

TEST(SamplerTest, SameSeedAndStepGiveTheSameDraw) {
  std::vector<float> logits(100);
  for (int i = 0; i < 100; ++i) logits[i] = std::sin(i * 0.37f);
  SamplingParams p = Params(1.0f);
  int differ = 0;
  for (uint64_t step = 0; step < 20; ++step) {
    EXPECT_EQ(SampleToken(logits, p, {}, 0, step).id, SampleToken(logits, p, {}, 0, step).id);
    SamplingParams q = p;
    q.seed = 43;
    differ += SampleToken(logits, p, {}, 0, step).id != SampleToken(logits, q, {}, 0, step).id;
  }
  EXPECT_GT(differ, 5);
}

TEST(SamplerTest, RepetitionPenaltyDemotesSeenTokens) {
  const std::vector<float> logits = {2.0f, 1.9f};
  SamplingParams p = Params(0);
  p.repetition_penalty = 1.2f;  // 2.0 / 1.2 < 1.9.
  const std::vector<int32_t> history = {0};
  EXPECT_EQ(SampleToken(logits, p, history, 0, 0).id, 1);
}

TEST(SamplerTest, FrequencyPenaltyCountsOnlyGeneratedTokens) {
  const std::vector<float> logits = {2.0f, 1.5f};
  SamplingParams p = Params(0);
  p.frequency_penalty = 0.3f;
  const std::vector<int32_t> history = {0, 0, 0, 1};  // Prompt {0, 0}, output {0, 1}.
  // Output counts: token 0 once (2.0 - 0.3 = 1.7), token 1 once (1.5 - 0.3 = 1.2).
  // Counting the prompt too would give token 0 2.0 - 0.9 = 1.1 and pick token 1.
  EXPECT_EQ(SampleToken(logits, p, history, 2, 0).id, 0);
}

TEST(SamplerTest, LogprobsAreNormalised) {
  const std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  SamplingParams p = Params(0);
  p.num_logprobs = 3;
  const SampledToken t = SampleToken(logits, p, {}, 0, 0);
  ASSERT_EQ(t.top_logprobs.size(), 3u);
  EXPECT_EQ(t.top_logprobs[0].first, 2);
  double total = 0;
  for (const auto& [id, lp] : t.top_logprobs) total += std::exp(lp);
  EXPECT_NEAR(total, 1.0, 1e-6);
  EXPECT_FLOAT_EQ(t.logprob, t.top_logprobs[0].second);
}

// The device sampler's penalty lists, applied as its kernel applies them (each listed token
// once: repetition, then presence + frequency * output count), give the logits the host
// sampler penalises: the greedy choice under penalties agrees, over random histories.
TEST(SamplerTest, DevicePenaltyListsReproduceTheHostPenalties) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> logit(-3.0f, 3.0f);
  std::uniform_int_distribution<int32_t> token(0, 39);
  for (int trial = 0; trial < 300; ++trial) {
    SamplingParams p = Params(0);
    p.repetition_penalty = trial % 3 == 0 ? 1.0f : 1.0f + 0.5f * (trial % 5);
    p.presence_penalty = trial % 4 == 0 ? 0.0f : 0.4f;
    p.frequency_penalty = trial % 7 == 0 ? 0.0f : 0.3f;
    std::vector<float> logits(40);
    for (float& v : logits) v = logit(rng);
    std::vector<int32_t> history(1 + trial % 30);
    for (int32_t& t : history) t = token(rng);
    const size_t output_start = history.size() / 2;

    std::vector<int32_t> tokens = {99};  // Entries of an earlier row stay untouched.
    std::vector<int32_t> counts = {1};
    const kernels::DeviceSamplingRow row =
        DeviceSamplingRowFor(p, history, output_start, 3, &tokens, &counts);
    ASSERT_EQ(row.penalty_begin, 1);
    ASSERT_EQ(row.penalty_end, static_cast<int32_t>(tokens.size()));
    std::vector<float> penalised = logits;
    for (int32_t e = row.penalty_begin; e < row.penalty_end; ++e) {
      float& v = penalised[tokens[e]];
      if (row.repetition_penalty != 1.0f) {
        v = v > 0 ? v / row.repetition_penalty : v * row.repetition_penalty;
      }
      if (counts[e] > 0) v -= row.presence_penalty + row.frequency_penalty * counts[e];
    }
    const int32_t device_choice = static_cast<int32_t>(
        std::max_element(penalised.begin(), penalised.end()) - penalised.begin());
    EXPECT_EQ(device_choice, SampleToken(logits, p, history, output_start, 3).id)
        << "trial " << trial;
  }
}

TEST(SamplerTest, DeviceRowsWithoutPenaltiesListNothing) {
  std::vector<int32_t> tokens, counts;
  SamplingParams p = Params(0.7f);
  p.top_k = 5;
  p.min_p = 0.1f;
  const std::vector<int32_t> history = {1, 2, 2, 3};
  const kernels::DeviceSamplingRow row = DeviceSamplingRowFor(p, history, 2, 9, &tokens, &counts);
  EXPECT_TRUE(tokens.empty());
  EXPECT_EQ(row.penalty_begin, row.penalty_end);
  EXPECT_EQ(row.top_k, 5);
  EXPECT_FLOAT_EQ(row.min_p, 0.1f);
  // The step enters the seed: two steps of one request draw differently.
  EXPECT_NE(row.seed, DeviceSamplingRowFor(p, history, 2, 10, &tokens, &counts).seed);
}

TEST(SamplingParamsTest, RejectsImpossibleValuesNamingTheField) {
  SamplingParams p;
  p.temperature = -1;
  EXPECT_NE(p.Validate(10).message().find("temperature = -1"), std::string::npos);
  p = SamplingParams();
  p.top_p = 0;
  EXPECT_NE(p.Validate(10).message().find("top_p"), std::string::npos);
  p = SamplingParams();
  p.top_p = 1.5f;
  EXPECT_FALSE(p.Validate(10).ok());
  p = SamplingParams();
  p.min_p = 1.0f;
  EXPECT_FALSE(p.Validate(10).ok());
  p = SamplingParams();
  p.top_k = -2;
  EXPECT_NE(p.Validate(10).message().find("top_k"), std::string::npos);
  EXPECT_TRUE(SamplingParams().Validate(10).ok());
}

}  // namespace
}  // namespace tessera
