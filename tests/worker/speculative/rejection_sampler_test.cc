#include "worker/speculative/rejection_sampler.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "worker/sampler.h"

namespace tessera {
namespace {

SamplingParams Params(float temperature, uint64_t seed = 7) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = seed;
  p.has_seed = true;
  return p;
}

// Rows of logits, concatenated.
std::vector<float> Rows(const std::vector<std::vector<float>>& rows) {
  std::vector<float> out;
  for (const auto& r : rows) out.insert(out.end(), r.begin(), r.end());
  return out;
}

std::vector<int32_t> Ids(const std::vector<SampledToken>& tokens) {
  std::vector<int32_t> ids;
  for (const auto& t : tokens) ids.push_back(t.id);
  return ids;
}

TEST(VerifyProposalTest, GreedyAcceptsWhileTheProposalIsTheArgmax) {
  const std::vector<float> logits = Rows({{0, 3, 1, 0}, {2, 0, 1, 0}, {0, 0, 0, 5}});
  DraftProposal proposal{{1, 2}, {}};  // 1 is row 0's argmax, 2 is not row 1's (0 is).
  const auto out = VerifyProposal(logits, 4, proposal, Params(0), {3}, 0, 0);
  EXPECT_EQ(Ids(out), (std::vector<int32_t>{1, 0}));  // The correction is row 1's argmax.

  proposal.tokens = {1, 0};  // All accepted: row 2 adds a token of its own.
  EXPECT_EQ(Ids(VerifyProposal(logits, 4, proposal, Params(0), {3}, 0, 0)),
            (std::vector<int32_t>{1, 0, 3}));
  proposal.tokens = {2, 0};  // The first rejected: nothing after it counts.
  EXPECT_EQ(Ids(VerifyProposal(logits, 4, proposal, Params(0), {3}, 0, 0)),
            (std::vector<int32_t>{1}));
}

TEST(VerifyProposalTest, GreedyWithPenaltiesMatchesDecodingOneTokenAtATime) {
  // Repetition penalty: row j sees the accepted proposals as history, as plain decoding
  // would have seen the tokens it generated.
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  SamplingParams p = Params(0);
  p.repetition_penalty = 1.8f;
  p.presence_penalty = 0.5f;
  const int vocab = 12;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> logits(4 * vocab);
    for (float& x : logits) x = normal(rng);
    std::vector<int32_t> history = {2, 5, 2, 7};
    // What decoding without speculation gives, token by token.
    std::vector<int32_t> plain;
    std::vector<int32_t> context = history;
    for (int j = 0; j < 4; ++j) {
      const auto row = absl::MakeConstSpan(logits).subspan(j * vocab, vocab);
      plain.push_back(SampleToken(row, p, context, 2, j).id);
      context.push_back(plain.back());
    }
    // A proposal that is right for its first `good` tokens.
    const int good = trial % 4;
    DraftProposal proposal;
    for (int j = 0; j < 3; ++j) proposal.tokens.push_back(j < good ? plain[j] : (plain[j] + 1) % vocab);
    const auto out = VerifyProposal(logits, vocab, proposal, p, history, 2, 0);
    const std::vector<int32_t> expected(plain.begin(), plain.begin() + std::min(good, 3) + 1);
    EXPECT_EQ(Ids(out), expected) << "trial " << trial;
  }
}

TEST(VerifyProposalTest, ReportsTheRawLogprobOfEachToken) {
  const std::vector<float> logits = Rows({{0, 3, 1, 0}, {2, 0, 1, 0}});
  SamplingParams p = Params(0);
  p.num_logprobs = 2;
  const auto out = VerifyProposal(logits, 4, DraftProposal{{1}, {}}, p, {0}, 0, 0);
  ASSERT_EQ(out.size(), 2u);
  const double lse0 = std::log(std::exp(0.0) * 2 + std::exp(3.0) + std::exp(1.0));
  EXPECT_NEAR(out[0].logprob, 3.0 - lse0, 1e-5);
  ASSERT_EQ(out[1].top_logprobs.size(), 2u);
  EXPECT_EQ(out[1].top_logprobs[0].first, 0);
}

// Chi-square statistic of `counts` against probabilities `p` (cells with p = 0 must be empty).
double ChiSquare(const std::vector<int>& counts, const std::vector<double>& p, int n, int* dof) {
  double chi = 0;
  *dof = -1;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0 under the target";
      continue;
    }
    const double expected = p[i] * n;
    chi += (counts[i] - expected) * (counts[i] - expected) / expected;
    ++*dof;
  }
  return chi;
}

std::vector<double> Probabilities(const TokenDistribution& d, int vocab) {
  std::vector<double> p(vocab, 0.0);
  for (size_t i = 0; i < d.ids.size(); ++i) p[d.ids[i]] = d.weights[i] / d.total;
  return p;
}

// The statistical guarantee: whatever the proposals, the first token out follows the
// target's distribution, and so does the second given the first was accepted.
struct DistributionCase {
  const char* name;
  SamplingParams params;
  bool draft_model;  // Proposals sampled from a draft distribution; else a fixed token.
};

class VerifyProposalDistributionTest : public ::testing::TestWithParam<DistributionCase> {};

TEST_P(VerifyProposalDistributionTest, KeepsTheTargetDistribution) {
  const DistributionCase& c = GetParam();
  const int vocab = 6;
  const std::vector<float> target = Rows({{1.0f, 0.2f, 2.0f, -1.0f, 0.5f, 1.5f},
                                          {0.0f, 1.0f, -0.5f, 2.0f, 0.3f, 0.1f},
                                          {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}});
  const std::vector<float> draft_logits = Rows({{2.0f, 0.0f, 0.5f, 0.5f, -1.0f, 1.0f},
                                                {0.5f, 0.5f, 0.5f, 1.0f, 1.0f, 0.0f}});
  const std::vector<int32_t> history = {0, 1};
  SamplingParams draft_params = c.params;
  const TokenDistribution p0 =
      SamplingDistribution(absl::MakeConstSpan(target).subspan(0, vocab), c.params, history, 0);
  const int n = 40000;
  std::vector<int> first(vocab, 0), second(vocab, 0);
  int with_second = 0;
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (int trial = 0; trial < n; ++trial) {
    SamplingParams params = c.params;
    params.seed = static_cast<uint64_t>(trial) * 7919 + 1;
    DraftProposal proposal;
    if (c.draft_model) {
      std::vector<int32_t> context = history;
      for (int j = 0; j < 2; ++j) {
        TokenDistribution q = SamplingDistribution(
            absl::MakeConstSpan(draft_logits).subspan(j * vocab, vocab), draft_params, context, 0);
        const int32_t d = q.Draw(uniform(rng));
        proposal.tokens.push_back(d);
        proposal.distributions.push_back(std::move(q));
        context.push_back(d);
      }
    } else {
      proposal.tokens = {2, 3};  // Prompt lookup: the same guess every time.
    }
    const auto out = VerifyProposal(target, vocab, proposal, params, history, 0, 5);
    ASSERT_GE(out.size(), 1u);
    ASSERT_LE(out.size(), 3u);
    ++first[out[0].id];
    if (out.size() >= 2) {
      ++second[out[1].id];
      ++with_second;
    }
  }
  int dof = 0;
  const double chi_first = ChiSquare(first, Probabilities(p0, vocab), n, &dof);
  // 5 degrees of freedom at most: 25 is far in the tail (p < 1e-4) of a correct sampler.
  EXPECT_LT(chi_first, 25.0) << c.name << ": first token, dof " << dof;
  ASSERT_GT(with_second, 1000);
  // Given an accepted first token, the second follows row 1's distribution (no
  // penalties here, so row 1 does not depend on which token was accepted).
  std::vector<int32_t> context = history;
  context.push_back(2);
  const TokenDistribution p1 =
      SamplingDistribution(absl::MakeConstSpan(target).subspan(vocab, vocab), c.params, context, 0);
  const double chi_second = ChiSquare(second, Probabilities(p1, vocab), with_second, &dof);
  EXPECT_LT(chi_second, 25.0) << c.name << ": second token, dof " << dof;
}

SamplingParams With(float temperature, int top_k, float top_p, float min_p) {
  SamplingParams p = Params(temperature);
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, VerifyProposalDistributionTest,
    ::testing::Values(DistributionCase{"lookup, t=1", With(1.0f, 0, 1.0f, 0.0f), false},
                      DistributionCase{"lookup, t=0.7 top-p 0.9", With(0.7f, 0, 0.9f, 0.0f), false},
                      DistributionCase{"draft, t=1", With(1.0f, 0, 1.0f, 0.0f), true},
                      DistributionCase{"draft, t=1.3 top-k 4 min-p 0.05", With(1.3f, 4, 1.0f, 0.05f),
                                       true}),
    [](const ::testing::TestParamInfo<DistributionCase>& info) {
      return std::string(info.param.draft_model ? "Draft" : "Lookup") + std::to_string(info.index);
    });

}  // namespace
}  // namespace tessera
