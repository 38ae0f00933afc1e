#include "tools/eval/eval_metrics.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessera::eval {

std::vector<Window> MakeWindows(size_t num_tokens, size_t context, size_t max_positions) {
  std::vector<Window> windows;
  if (context < 2 || num_tokens < 2) return windows;
  size_t remaining = max_positions > 0 ? max_positions : num_tokens;
  for (size_t begin = 0; begin + 1 < num_tokens && remaining > 0;) {
    const size_t length = std::min({context, num_tokens - begin, remaining + 1});
    windows.push_back({begin, length});
    remaining -= length - 1;
    begin += length - 1;  // The last token starts the next window: no transition skipped.
  }
  return windows;
}

size_t ScoredPositions(absl::Span<const Window> windows) {
  size_t n = 0;
  for (const Window& w : windows) n += w.length - 1;
  return n;
}

double NextTokenNll(absl::Span<const float> row, int32_t target) {
  double max = row[0];
  for (float v : row) max = std::max(max, static_cast<double>(v));
  double sum = 0.0;
  for (float v : row) sum += std::exp(static_cast<double>(v) - max);
  return std::log(sum) + max - static_cast<double>(row[target]);
}

absl::Status ScoreRows(absl::Span<const float> logits, size_t vocab,
                       absl::Span<const int32_t> targets, std::vector<PositionScore>* out) {
  if (vocab == 0 || logits.size() < targets.size() * vocab) {
    return absl::InvalidArgumentError(absl::StrCat("logits hold ", logits.size(), " values, fewer than ",
                                                   targets.size(), " rows of ", vocab));
  }
  for (size_t r = 0; r < targets.size(); ++r) {
    if (targets[r] < 0 || static_cast<size_t>(targets[r]) >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", targets[r], " outside the vocabulary of ", vocab));
    }
    const absl::Span<const float> row = logits.subspan(r * vocab, vocab);
    const int32_t argmax = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    out->push_back({argmax, NextTokenNll(row, targets[r])});
  }
  return absl::OkStatus();
}

double Perplexity(absl::Span<const PositionScore> scores) {
  if (scores.empty()) return 1.0;
  double total = 0.0;
  for (const PositionScore& s : scores) total += s.nll;
  return std::exp(total / static_cast<double>(scores.size()));
}

absl::StatusOr<Comparison> Compare(absl::Span<const PositionScore> baseline,
                                   absl::Span<const PositionScore> candidate) {
  if (baseline.size() != candidate.size()) {
    return absl::InvalidArgumentError(absl::StrCat("baseline scored ", baseline.size(),
                                                   " positions but the candidate ", candidate.size()));
  }
  Comparison c;
  c.positions = baseline.size();
  size_t agree = 0;
  for (size_t i = 0; i < baseline.size(); ++i) agree += baseline[i].argmax == candidate[i].argmax;
  c.top1_agreement = c.positions == 0 ? 1.0 : static_cast<double>(agree) / c.positions;
  c.baseline_perplexity = Perplexity(baseline);
  c.candidate_perplexity = Perplexity(candidate);
  c.ppl_increase = c.candidate_perplexity / c.baseline_perplexity - 1.0;
  return c;
}

double MaxAbsDiff(absl::Span<const float> a, absl::Span<const float> b) {
  double worst = 0.0;
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  }
  return worst;
}

std::vector<std::string> ThresholdFailures(const Comparison& c, const Thresholds& t) {
  std::vector<std::string> failures;
  if (c.top1_agreement < t.min_top1) {
    failures.push_back(absl::StrFormat("top-1 agreement %.4f is below --min-top1 %.4f",
                                       c.top1_agreement, t.min_top1));
  }
  if (c.ppl_increase > t.max_ppl_increase) {
    failures.push_back(absl::StrFormat(
        "perplexity rose %.2f%% (%.4f -> %.4f), above --max-ppl-increase %.2f%%",
        100 * c.ppl_increase, c.baseline_perplexity, c.candidate_perplexity,
        100 * t.max_ppl_increase));
  }
  return failures;
}

}  // namespace tessera::eval
