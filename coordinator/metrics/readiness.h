#ifndef TESSERA_COORDINATOR_METRICS_READINESS_H_
#define TESSERA_COORDINATOR_METRICS_READINESS_H_

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics/http_server.h"
#include "common/net/listener_stats.h"

namespace tessera {

// Liveness and readiness of the coordinator, fed by the engine thread and read by the
// HTTP handlers and the gRPC health updater.
//  - Live: the engine loop ticked within `stall_limit` (it ticks every 50 ms or faster).
//  - Ready: live, and at least one replica completed a real step since it was formed
//    (the engine's warm-up generation is the first one) and has not failed since. The
//    engine fails a replica whose step fails or whose idle heartbeat probe gets no
//    answer, so a dead worker turns readiness off within one heartbeat interval.
//    And every watched listener accepts: a process whose API port cannot take
//    connections must not draw traffic, even while HTTP and the engine are fine.
class Readiness {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Readiness(std::chrono::milliseconds stall_limit = std::chrono::seconds(10))
      : stall_limit_(stall_limit) {}

  void LoopTick(Clock::time_point now = Clock::now());
  void ReplicaFormed(int replica);
  void StepSucceeded(int replica);
  void ReplicaFailed(int replica, std::string reason);
  // A listening port readiness depends on; it must outlive this object's checks.
  void WatchListener(const net::ListenerStats* listener);

  HealthResult Live(Clock::time_point now = Clock::now()) const;
  HealthResult Ready(Clock::time_point now = Clock::now()) const;
  int num_serving() const;

 private:
  struct Replica {
    bool formed = false;
    bool stepped = false;
    std::string last_failure;
  };
  const std::chrono::milliseconds stall_limit_;
  mutable absl::Mutex mu_;
  bool ticked_ ABSL_GUARDED_BY(mu_) = false;
  Clock::time_point last_tick_ ABSL_GUARDED_BY(mu_);
  std::map<int, Replica> replicas_ ABSL_GUARDED_BY(mu_);
  std::vector<const net::ListenerStats*> listeners_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_METRICS_READINESS_H_
