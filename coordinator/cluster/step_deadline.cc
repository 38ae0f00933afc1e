#include "coordinator/cluster/step_deadline.h"

#include <algorithm>

namespace tessera {

std::chrono::milliseconds StepDeadline::For(int64_t tokens) const {
  if (steps_ < kWarmupSteps) return ceiling_;
  const double learned_ms = kMargin * static_cast<double>(std::max<int64_t>(tokens, 1)) * max_seconds_per_token_ * 1e3;
  if (learned_ms >= static_cast<double>(ceiling_.count())) return ceiling_;
  return std::clamp(std::chrono::milliseconds(static_cast<int64_t>(learned_ms)), floor_, ceiling_);
}

void StepDeadline::Observe(int64_t tokens, std::chrono::nanoseconds took) {
  ++steps_;
  const double per_token = std::chrono::duration<double>(took).count() / static_cast<double>(std::max<int64_t>(tokens, 1));
  max_seconds_per_token_ = std::max(max_seconds_per_token_, per_token);
}

}  // namespace tessera
