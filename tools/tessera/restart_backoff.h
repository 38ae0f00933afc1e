#ifndef TESSERA_TOOLS_TESSERA_RESTART_BACKOFF_H_
#define TESSERA_TOOLS_TESSERA_RESTART_BACKOFF_H_

#include <chrono>

namespace tessera::cli {

// How long `tessera serve` waits before restarting a worker that died: short at first (a
// one-off crash costs half a second), doubling while the worker keeps dying (a worker
// that cannot start must not spin), and back to short once it has stayed up a while.
class RestartBackoff {
 public:
  using Duration = std::chrono::milliseconds;

  explicit RestartBackoff(Duration initial = Duration(500), Duration max = Duration(30'000),
                          Duration stable = Duration(60'000))
      : initial_(initial), max_(max), stable_(stable), next_(initial) {}

  // The wait before restarting a child that died after running for `uptime`.
  Duration NextDelay(Duration uptime);

 private:
  Duration initial_, max_, stable_;
  Duration next_;
};

}  // namespace tessera::cli

#endif  // TESSERA_TOOLS_TESSERA_RESTART_BACKOFF_H_
