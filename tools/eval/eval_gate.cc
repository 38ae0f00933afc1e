#include "tools/eval/eval_gate.h"

#include <algorithm>
#include <cmath>
#include <string>

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

std::vector<Window> MakeLlamaCppChunks(size_t num_tokens, size_t context, size_t max_positions) {
  std::vector<Window> windows;
  if (context < 4) return windows;
  size_t scored = 0;
  for (size_t begin = 0; begin + context <= num_tokens; begin += context) {
    Window w{begin, context, context / 2};
    if (max_positions > 0 && scored + (w.length - 1 - w.first_scored) > max_positions) break;
    scored += w.length - 1 - w.first_scored;
    windows.push_back(w);
  }
  return windows;
}

size_t ScoredPositions(absl::Span<const Window> windows) {
  size_t n = 0;
  for (const Window& w : windows) n += w.length - 1 - w.first_scored;
  return n;
}

absl::Status ScoreRows(absl::Span<const float> logits, size_t vocab,
                       absl::Span<const int32_t> targets, std::vector<PositionScore>* out) {
  if (vocab == 0 || logits.size() < targets.size() * vocab) {
    return absl::InvalidArgumentError(absl::StrCat("logits hold ", logits.size(),
                                                   " values, fewer than ", targets.size(),
                                                   " rows of ", vocab));
  }
  for (size_t r = 0; r < targets.size(); ++r) {
    auto score = ScorePosition(logits.subspan(r * vocab, vocab), targets[r]);
    if (!score.ok()) return score.status();
    out->push_back(*score);
  }
  return absl::OkStatus();
}

double MaxAbsDiff(absl::Span<const float> a, absl::Span<const float> b) {
  double worst = 0.0;
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  }
  return worst;
}

Thresholds DefaultThresholds(std::string_view weight_format, std::string_view kv_cache_dtype) {
  Thresholds t;
  if (weight_format == "int8") {
    t.max_mean_kld = 1.5 * kPeerQ8_0MeanKld;
  } else if (weight_format == "fp8") {
    t.max_mean_kld = kPeerQ4KMMeanKld;
  } else if (weight_format == "gptq" || weight_format == "awq" || weight_format == "int4") {
    t.max_mean_kld = 2 * kPeerQ4KMMeanKld;
  } else {
    t.max_mean_kld = 1e-3;  // A float candidate, or a GGUF file's own codes.
  }
  if (kv_cache_dtype == "fp8") t.max_mean_kld += kPeerQ4KMMeanKld;
  if (kv_cache_dtype == "bf16") t.max_mean_kld += 1.5 * kPeerQ8_0MeanKld;
  return t;
}

std::vector<std::string> ThresholdFailures(const AgreementMetrics& m, const Thresholds& t) {
  std::vector<std::string> failures;
  if (m.kld.mean > t.max_mean_kld) {
    failures.push_back(absl::StrFormat("mean KL divergence %.5f is above --max-mean-kld %.5f (p99 %.4f)",
                                       m.kld.mean, t.max_mean_kld, m.kld.p99));
  }
  if (t.min_top1 >= 0 && m.top1_agreement < t.min_top1) {
    failures.push_back(absl::StrFormat("top-1 agreement %.4f is below --min-top1 %.4f",
                                       m.top1_agreement, t.min_top1));
  }
  if (t.max_ppl_increase >= 0 && m.ppl_increase > t.max_ppl_increase) {
    failures.push_back(absl::StrFormat(
        "perplexity rose %.2f%% (%.4f -> %.4f), above --max-ppl-increase %.2f%%",
        100 * m.ppl_increase, m.baseline_perplexity, m.candidate_perplexity,
        100 * t.max_ppl_increase));
  }
  return failures;
}

}  // namespace tessera::eval
