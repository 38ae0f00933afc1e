#ifndef TESSERA_COORDINATOR_CLUSTER_STEP_DEADLINE_H_
#define TESSERA_COORDINATOR_CLUSTER_STEP_DEADLINE_H_

#include <chrono>
#include <cstdint>

namespace tessera {

// How long one step of a group may take before the coordinator takes the group for stuck.
// A rank cut off from its peers but not from the coordinator keeps heartbeating while its
// step waits in a collective, until the workers' collective timeout (10 s): longer than
// the deadline of the requests in that step, which then ended DEADLINE_EXCEEDED instead of
// UNAVAILABLE (tests/netfault). So the deadline is learned from the group's own steps:
// after kWarmupSteps, kMargin x the step's tokens x the most seconds per token seen, but
// never under `floor` (scheduling noise, a loaded host) nor over `ceiling` (the fixed step
// timeout, used until then: the first steps capture graphs and warm caches). Per token,
// because a step of 2,048 prompt tokens rightly takes far longer than a decode step; the
// most seen, because small steps cost the most per token, which keeps big ones generous.
class StepDeadline {
 public:
  static constexpr int kWarmupSteps = 8;
  static constexpr double kMargin = 10.0;

  StepDeadline(std::chrono::milliseconds floor, std::chrono::milliseconds ceiling)
      : floor_(floor), ceiling_(ceiling) {}

  // The deadline of a step that schedules `tokens` tokens (at least 1 counted).
  std::chrono::milliseconds For(int64_t tokens) const;
  // A step of `tokens` tokens that completed in `took`.
  void Observe(int64_t tokens, std::chrono::nanoseconds took);

 private:
  const std::chrono::milliseconds floor_;
  const std::chrono::milliseconds ceiling_;
  int steps_ = 0;
  double max_seconds_per_token_ = 0;
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CLUSTER_STEP_DEADLINE_H_
