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
  // Rows before this one are context only: the window scores rows [first_scored, length - 1).
  size_t first_scored = 0;
};

// Windows of at most `context` tokens (>= 2) over `num_tokens` ids. Consecutive windows
// share one token so that every next-token transition is scored exactly once. With
// `max_positions` > 0 at most that many positions are scored in all.
std::vector<Window> MakeWindows(size_t num_tokens, size_t context, size_t max_positions);

// llama.cpp's `llama-perplexity` windows: consecutive, non-overlapping chunks of `context`
// tokens (a shorter tail is dropped), each scoring only its second half, so that every
// scored token has at least context / 2 tokens before it. With these the figures compare
// with its --kl-divergence on the same tokens. With `max_positions` > 0, only as many
// whole chunks as score at most that many positions.
std::vector<Window> MakeLlamaCppChunks(size_t num_tokens, size_t context, size_t max_positions);

// Total positions the windows score.
size_t ScoredPositions(absl::Span<const Window> windows);

// Scores rows [0, targets.size()) of `logits` ([rows, vocab], row-major) against their
// next tokens `targets`, appending to *out. Fails if the logits are too few or a row is
// bad (see ScorePosition).
absl::Status ScoreRows(absl::Span<const float> logits, size_t vocab,
                       absl::Span<const int32_t> targets, std::vector<PositionScore>* out);

// Largest |a - b| over the common prefix of two logit arrays; 0 when empty.
double MaxAbsDiff(absl::Span<const float> a, absl::Span<const float> b);

// What a candidate must meet. The gate is the mean KL divergence of its next-token
// distributions from the baseline's, the number llama.cpp's `llama-perplexity
// --kl-divergence` reports for its own formats; top-1 agreement and perplexity gate only
// when set (negative: reported, not gated).
struct Thresholds {
  double max_mean_kld = 1e-3;  // Nats.
  double min_top1 = -1;
  double max_ppl_increase = -1;  // Relative: 0.02 is 2 %.
};

// llama.cpp's own formats measured with `llama-perplexity --kl-divergence` on
// SmolLM2-135M-Instruct dequantized to F32, Debian's Apache-2.0 and GPL-3 texts, context
// 512 (benchmarks/peer/quality_side_by_side.py; benchmarks/results/quality_side_by_side*.json).
inline constexpr double kPeerQ8_0MeanKld = 0.0050;
inline constexpr double kPeerQ4KMMeanKld = 0.077;

// The gate's defaults from the peer, per format of the candidate's weights ("none",
// "int8", "fp8", "gptq", "awq", "gguf" for a GGUF file's own types) plus its KV cache
// ("auto"/"fp32", "bf16", "fp8"); the budgets of weights and cache add up:
//   int8 weights <= 1.5 x Q8_0's; FP8 weights and an FP8 cache <= Q4_K_M's (E4M3 keeps 3
//   mantissa bits, between the 4- and 6-bit formats); GPTQ/AWQ 4-bit <= 2 x Q4_K_M's; a
//   GGUF type served natively, a float candidate, <= 1e-3; a BF16 cache <= 1.5 x Q8_0's.
Thresholds DefaultThresholds(std::string_view weight_format, std::string_view kv_cache_dtype = "auto");

// Why `m` misses `t`, one line per failed threshold; empty when it passes.
std::vector<std::string> ThresholdFailures(const AgreementMetrics& m, const Thresholds& t);

}  // namespace tessera::eval

#endif  // TESSERA_TOOLS_EVAL_EVAL_GATE_H_
