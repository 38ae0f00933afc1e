#include "common/eval_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace tessera {

absl::StatusOr<PositionScore> ScorePosition(absl::Span<const float> logits,
                                            int32_t target) {
  if (logits.empty()) return absl::InvalidArgumentError("empty logits row");
  if (target < 0 || static_cast<size_t>(target) >= logits.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "target token %d outside the vocabulary of %d", target,
        static_cast<int>(logits.size())));
  }
  PositionScore score;
  double max_logit = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!std::isfinite(logits[i])) {
      return absl::InternalError(absl::StrFormat("non-finite logit at %d",
                                                 static_cast<int>(i)));
    }
    if (logits[i] > max_logit) {
      max_logit = logits[i];
      score.argmax = static_cast<int32_t>(i);
    }
  }
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - max_logit);
  score.nll = max_logit + std::log(sum) - static_cast<double>(logits[target]);
  return score;
}

absl::StatusOr<AgreementMetrics> CompareScores(
    absl::Span<const PositionScore> baseline,
    absl::Span<const PositionScore> candidate) {
  if (baseline.size() != candidate.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "baseline scored %d positions, candidate %d",
        static_cast<int>(baseline.size()), static_cast<int>(candidate.size())));
  }
  if (baseline.empty()) return absl::InvalidArgumentError("no positions scored");
  AgreementMetrics m;
  m.positions = static_cast<int64_t>(baseline.size());
  int64_t agree = 0;
  double base_nll = 0.0, cand_nll = 0.0;
  for (size_t i = 0; i < baseline.size(); ++i) {
    if (baseline[i].argmax == candidate[i].argmax) ++agree;
    base_nll += baseline[i].nll;
    cand_nll += candidate[i].nll;
  }
  const double n = static_cast<double>(m.positions);
  m.top1_agreement = static_cast<double>(agree) / n;
  m.baseline_perplexity = std::exp(base_nll / n);
  m.candidate_perplexity = std::exp(cand_nll / n);
  m.ppl_increase = m.candidate_perplexity / m.baseline_perplexity - 1.0;
  return m;
}

void LogSoftmax(absl::Span<const float> logits, absl::Span<float> out) {
  double max_logit = -std::numeric_limits<double>::infinity();
  for (float v : logits) max_logit = std::max(max_logit, static_cast<double>(v));
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - max_logit);
  const double log_z = max_logit + std::log(sum);
  for (size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<float>(static_cast<double>(logits[i]) - log_z);
}

double KlDivergence(absl::Span<const float> base_log_probs, absl::Span<const float> candidate_logits) {
  double max_logit = -std::numeric_limits<double>::infinity();
  for (float v : candidate_logits) max_logit = std::max(max_logit, static_cast<double>(v));
  double sum = 0.0;
  for (float v : candidate_logits) sum += std::exp(static_cast<double>(v) - max_logit);
  const double log_z = max_logit + std::log(sum);
  double kl = 0.0;
  for (size_t i = 0; i < base_log_probs.size(); ++i) {
    const double lp = base_log_probs[i];
    // Rounded to float as the baseline's were, so that identical logits give exactly 0.
    const double lq = static_cast<float>(static_cast<double>(candidate_logits[i]) - log_z);
    kl += std::exp(lp) * (lp - lq);
  }
  return std::max(kl, 0.0);  // Rounding can leave -1e-17 for identical rows.
}

DivergenceSummary SummarizeDivergences(std::vector<double> klds) {
  DivergenceSummary s;
  if (klds.empty()) return s;
  std::sort(klds.begin(), klds.end());
  double sum = 0.0;
  for (double k : klds) sum += k;
  const auto at = [&](double q) {
    // Nearest rank, as a percentile of n sorted values.
    const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(klds.size())));
    return klds[std::min(klds.size() - 1, rank == 0 ? 0 : rank - 1)];
  };
  s.mean = sum / static_cast<double>(klds.size());
  s.median = at(0.5);
  s.p99 = at(0.99);
  s.max = klds.back();
  return s;
}

}  // namespace tessera
