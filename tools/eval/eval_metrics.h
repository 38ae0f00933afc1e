#ifndef TESSERA_TOOLS_EVAL_EVAL_METRICS_H_
#define TESSERA_TOOLS_EVAL_EVAL_METRICS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

// The arithmetic of `tessera eval`, apart from any model so it can be tested on
// hand-made logits: windows over a token stream, per-position scores, and the
// comparison of a candidate against a baseline.
namespace tessera::eval {

// A slice [begin, begin + length) of the token ids run as one prefill step. Row r of its
// logits predicts token begin + r + 1, so a window scores length - 1 positions.
struct Window {
  size_t begin = 0;
  size_t length = 0;
};

// Windows of at most `context` tokens (>= 2) over `num_tokens` ids. Consecutive windows
// share one token so that every next-token transition is scored exactly once. With
// `max_positions` > 0 at most that many positions are scored in all.
std::vector<Window> MakeWindows(size_t num_tokens, size_t context, size_t max_positions);

// Total positions the windows score.
size_t ScoredPositions(absl::Span<const Window> windows);

// What is kept of a model's prediction at one position: the argmax and the negative
// log-likelihood of the token that actually follows.
struct PositionScore {
  int32_t argmax = 0;
  double nll = 0.0;
};

// -log softmax(row)[target], in double with the max subtracted so large logits do not
// overflow.
double NextTokenNll(absl::Span<const float> row, int32_t target);

// Scores rows [0, targets.size()) of `logits` ([rows, vocab], row-major) against their
// next tokens `targets`, appending to *out. Fails if a target is outside the vocabulary
// or the logits are too few.
absl::Status ScoreRows(absl::Span<const float> logits, size_t vocab,
                       absl::Span<const int32_t> targets, std::vector<PositionScore>* out);

// Perplexity = exp(mean NLL); 0 positions give 1.
double Perplexity(absl::Span<const PositionScore> scores);

struct Comparison {
  size_t positions = 0;
  double top1_agreement = 0.0;       // Fraction of positions with the same argmax.
  double baseline_perplexity = 0.0;
  double candidate_perplexity = 0.0;
  double ppl_increase = 0.0;         // candidate / baseline - 1 (negative when better).
};

// Both score lists must have the same length.
absl::StatusOr<Comparison> Compare(absl::Span<const PositionScore> baseline,
                                   absl::Span<const PositionScore> candidate);

// Largest |a - b| over two equally long logit arrays; 0 when empty.
double MaxAbsDiff(absl::Span<const float> a, absl::Span<const float> b);

struct Thresholds {
  double min_top1 = 0.99;
  double max_ppl_increase = 0.02;
};

// Why `c` misses `t`, one line per failed threshold; empty when it passes.
std::vector<std::string> ThresholdFailures(const Comparison& c, const Thresholds& t);

}  // namespace tessera::eval

#endif  // TESSERA_TOOLS_EVAL_EVAL_METRICS_H_
