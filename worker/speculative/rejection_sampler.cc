#include "worker/speculative/rejection_sampler.h"

#include <algorithm>

namespace tessera {
namespace {

// Streams of SamplingUniform beside stream 0 (the target's own draw): the acceptance test
// and the draw from the residual distribution after a rejection.
constexpr uint64_t kAcceptStream = 0x5bd1e995acce9700ull;
constexpr uint64_t kResidualStream = 0x2545f4914f6cdd1dull;

// Draws from max(0, p - q), renormalised. With q a point mass at `rejected` that is p
// without it.
int32_t DrawResidual(const TokenDistribution& p, const TokenDistribution* q, int32_t rejected,
                     double u) {
  std::vector<double> residual(p.ids.size());
  double total = 0;
  for (size_t i = 0; i < p.ids.size(); ++i) {
    const double pi = p.weights[i] / p.total;
    const double qi = q != nullptr ? q->Probability(p.ids[i]) : (p.ids[i] == rejected ? 1.0 : 0.0);
    residual[i] = std::max(0.0, pi - qi);
    total += residual[i];
  }
  if (total <= 0) return p.ids[0];  // p == q up to rounding: a rejection had ~0 probability.
  const double target = u * total;
  double acc = 0;
  for (size_t i = 0; i < p.ids.size(); ++i) {
    acc += residual[i];
    if (target < acc && residual[i] > 0) return p.ids[i];
  }
  for (size_t i = p.ids.size(); i-- > 0;) {
    if (residual[i] > 0) return p.ids[i];
  }
  return p.ids[0];
}

}  // namespace

std::vector<SampledToken> VerifyProposal(absl::Span<const float> logits, int vocab,
                                         const DraftProposal& proposal,
                                         const SamplingParams& params,
                                         absl::Span<const int32_t> history, size_t output_start,
                                         uint64_t first_step) {
  std::vector<SampledToken> out;
  std::vector<int32_t> context(history.begin(), history.end());
  const size_t m = proposal.tokens.size();
  for (size_t j = 0; j <= m; ++j) {
    const absl::Span<const float> row = logits.subspan(j * vocab, vocab);
    const uint64_t step = first_step + j;
    if (j == m) {
      // Every proposal accepted: the row after the last one gives a token for free, drawn
      // as decoding without speculation draws it.
      out.push_back(SampleToken(row, params, context, output_start, step));
      break;
    }
    const TokenDistribution p = SamplingDistribution(row, params, context, output_start);
    SampledToken token;
    const int32_t d = proposal.tokens[j];
    const TokenDistribution* q =
        proposal.distributions.empty() ? nullptr : &proposal.distributions[j];
    bool accept;
    if (params.greedy()) {
      accept = d == p.ids[0];
    } else {
      const double pd = p.Probability(d);
      const double qd = q != nullptr ? q->Probability(d) : 1.0;
      accept = qd > 0 && SamplingUniform(params.seed, step, kAcceptStream) * qd < pd;
    }
    if (accept) {
      token.id = d;
      FillLogprobs(row, params.num_logprobs, &token);
      out.push_back(std::move(token));
      context.push_back(d);
      continue;
    }
    token.id = params.greedy()
                   ? p.ids[0]
                   : DrawResidual(p, q, d, SamplingUniform(params.seed, step, kResidualStream));
    FillLogprobs(row, params.num_logprobs, &token);
    out.push_back(std::move(token));
    break;
  }
  return out;
}

}  // namespace tessera
