#include "common/sampling_params.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace tessera {

absl::Status SamplingParams::Validate(int vocab_size) const {
  auto bad = [](absl::string_view field, auto value, absl::string_view rule) {
    return absl::InvalidArgumentError(absl::StrCat(field, " = ", value, ": ", rule));
  };
  if (!std::isfinite(temperature) || temperature < 0) {
    return bad("temperature", temperature, "must be >= 0 (0 means greedy)");
  }
  if (top_k < 0) return bad("top_k", top_k, "must be >= 0 (0 disables)");
  if (!(top_p > 0.0f && top_p <= 1.0f)) return bad("top_p", top_p, "must be in (0, 1]");
  if (!(min_p >= 0.0f && min_p < 1.0f)) return bad("min_p", min_p, "must be in [0, 1)");
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) {
    return bad("repetition_penalty", repetition_penalty, "must be > 0 (1 disables)");
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    return bad("presence_penalty", presence_penalty, "must be in [-2, 2]");
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    return bad("frequency_penalty", frequency_penalty, "must be in [-2, 2]");
  }
  if (num_logprobs < 0 || num_logprobs > 20) {
    return bad("logprobs", num_logprobs, "must be in [0, 20]");
  }
  (void)vocab_size;
  return absl::OkStatus();
}

}  // namespace tessera
