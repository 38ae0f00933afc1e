#ifndef TESSERA_COMMON_EVAL_METRICS_H_
#define TESSERA_COMMON_EVAL_METRICS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tessera {

// What the quality gate keeps per evaluated position: the argmax token and the
// negative log-likelihood of the actual next token. The baseline's full logits
// are not kept so that baseline and candidate never need to coexist in memory.
struct PositionScore {
  int32_t argmax = 0;
  double nll = 0.0;
};

// Scores one row of logits against `target`. The log-softmax is computed in
// double so that a bit-identical candidate yields exactly the baseline's NLL.
absl::StatusOr<PositionScore> ScorePosition(absl::Span<const float> logits,
                                            int32_t target);

// The log-softmax (natural log) of a logits row, computed in double: what the baseline
// keeps per position so the candidate's distribution can be compared with it whole.
void LogSoftmax(absl::Span<const float> logits, absl::Span<float> out);

// KL(P || Q) in nats for P given by its log-probabilities (LogSoftmax of the baseline)
// and Q by the candidate's logits, in double: as llama-perplexity --kl-divergence reports.
double KlDivergence(absl::Span<const float> base_log_probs, absl::Span<const float> candidate_logits);

// Mean, median, 99th percentile and maximum of per-position divergences.
struct DivergenceSummary {
  double mean = 0.0;
  double median = 0.0;
  double p99 = 0.0;
  double max = 0.0;
};
DivergenceSummary SummarizeDivergences(std::vector<double> klds);

// Aggregates of a candidate against a baseline over the same positions.
struct AgreementMetrics {
  int64_t positions = 0;
  double top1_agreement = 0.0;     // fraction of equal argmaxes
  double baseline_perplexity = 0.0;  // exp(mean NLL)
  double candidate_perplexity = 0.0;
  double ppl_increase = 0.0;       // candidate / baseline - 1
  DivergenceSummary kld;           // KL(baseline || candidate) per position, in nats.
};

// Fails when the spans differ in length or are empty.
absl::StatusOr<AgreementMetrics> CompareScores(
    absl::Span<const PositionScore> baseline,
    absl::Span<const PositionScore> candidate);

}  // namespace tessera

#endif  // TESSERA_COMMON_EVAL_METRICS_H_
