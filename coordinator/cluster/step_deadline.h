#ifndef TESSERA_COORDINATOR_CLUSTER_STEP_DEADLINE_H_
#define TESSERA_COORDINATOR_CLUSTER_STEP_DEADLINE_H_

#include <array>
#include <chrono>
#include <cstdint>

namespace tessera {

// How long one step of a group may take before the coordinator takes the group for stuck.
// A rank cut off from its peers but not from the coordinator keeps heartbeating while its
// step waits in a collective, until the workers' collective timeout (10 s): longer than
// the deadline of the requests in that step, which then ended DEADLINE_EXCEEDED instead of
// UNAVAILABLE (tests/netfault). So the deadline is learned from the group's last kWindow
// steps: kMargin x the step's tokens x the most seconds per token among them, never under
// `floor` (scheduling noise, a loaded host) nor over `ceiling` (the fixed step timeout).
// The ceiling also holds until kWarmupSteps steps have run (the first ones capture graphs
// and warm caches) and for a step with more tokens than any in the window: a prefill bigger
// than anything seen lately costs per token what nothing measured, so it is not guessed.
// A window, not all history, so that a spell of slow steps (a lossy link) stops counting
// once it is over.
class StepDeadline {
 public:
  static constexpr int kWarmupSteps = 8;
  static constexpr int kWindow = 64;
  static constexpr double kMargin = 10.0;

  StepDeadline(std::chrono::milliseconds floor, std::chrono::milliseconds ceiling)
      : floor_(floor), ceiling_(ceiling) {}

  // The deadline of a step that schedules `tokens` tokens (at least 1 counted).
  std::chrono::milliseconds For(int64_t tokens) const;
  // A step of `tokens` tokens that completed in `took`.
  void Observe(int64_t tokens, std::chrono::nanoseconds took);

 private:
  struct Step {
    int64_t tokens = 0;
    double seconds_per_token = 0;
  };

  const std::chrono::milliseconds floor_;
  const std::chrono::milliseconds ceiling_;
  std::array<Step, kWindow> window_{};
  int64_t steps_ = 0;  // Observed in all; the last min(steps_, kWindow) are in window_.
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CLUSTER_STEP_DEADLINE_H_
