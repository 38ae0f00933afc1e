#ifndef TESSERA_TOOLS_EVAL_EVAL_GATE_H_
#define TESSERA_TOOLS_EVAL_EVAL_GATE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/eval_metrics.h"

// The parts of `tessera eval` around the per-position math of common/eval_metrics.h:
// cutting a token stream into prefill windows, scoring a window's logits, and the pass/fail
// thresholds. Free of any model so they are tested on hand-made numbers.
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

// Scores rows [0, targets.size()) of `logits` ([rows, vocab], row-major) against their
// next tokens `targets`, appending to *out. Fails if the logits are too few or a row is
// bad (see ScorePosition).
absl::Status ScoreRows(absl::Span<const float> logits, size_t vocab,
                       absl::Span<const int32_t> targets, std::vector<PositionScore>* out);

// Largest |a - b| over the common prefix of two logit arrays; 0 when empty.
double MaxAbsDiff(absl::Span<const float> a, absl::Span<const float> b);

struct Thresholds {
  double min_top1 = 0.99;
  double max_ppl_increase = 0.02;  // Relative: 0.02 is 2 %.
};

// The gate's defaults for a candidate's weight format ("none", "int8", "fp8", "gptq",
// "awq", ...): 4-bit formats lose more by design and pass at >= 95 % top-1 and <= 6 %
// perplexity increase; everything else at >= 99 % and <= 2 %.
Thresholds DefaultThresholds(std::string_view weight_format);

// Why `m` misses `t`, one line per failed threshold; empty when it passes.
std::vector<std::string> ThresholdFailures(const AgreementMetrics& m, const Thresholds& t);

}  // namespace tessera::eval

#endif  // TESSERA_TOOLS_EVAL_EVAL_GATE_H_
