#include "coordinator/cluster/step_deadline.h"

#include <algorithm>

namespace tessera {

std::chrono::milliseconds StepDeadline::For(int64_t tokens) const {
  if (steps_ < kWarmupSteps) return ceiling_;
  tokens = std::max<int64_t>(tokens, 1);
  int64_t most_tokens = 0;
  double most_seconds_per_token = 0;
  const int64_t n = std::min<int64_t>(steps_, kWindow);
  for (int64_t i = 0; i < n; ++i) {
    most_tokens = std::max(most_tokens, window_[i].tokens);
    most_seconds_per_token = std::max(most_seconds_per_token, window_[i].seconds_per_token);
  }
  if (tokens > most_tokens) return ceiling_;
  const double learned_ms = kMargin * static_cast<double>(tokens) * most_seconds_per_token * 1e3;
  if (learned_ms >= static_cast<double>(ceiling_.count())) return ceiling_;
  return std::clamp(std::chrono::milliseconds(static_cast<int64_t>(learned_ms)), floor_, ceiling_);
}

void StepDeadline::Observe(int64_t tokens, std::chrono::nanoseconds took) {
  tokens = std::max<int64_t>(tokens, 1);
  window_[steps_ % kWindow] = {tokens, std::chrono::duration<double>(took).count() / static_cast<double>(tokens)};
  ++steps_;
}

}  // namespace tessera
