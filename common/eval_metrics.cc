#include "common/eval_metrics.h"

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

}  // namespace tessera
