#ifndef TESSERA_TOOLS_TESSERA_PROCESS_SUPERVISOR_H_
#define TESSERA_TOOLS_TESSERA_PROCESS_SUPERVISOR_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tools/tessera/restart_backoff.h"

namespace tessera::cli {

// The children of `tessera serve`: one coordinator and its workers. A worker that dies is
// logged and started again with the same flags after a backoff (the coordinator admits the
// replacement and re-forms its replica); a coordinator that dies ends the run, since the
// request state died with it. Only serve's main thread may call it: it forks (SpawnChild).
class ProcessSupervisor {
 public:
  using Clock = std::chrono::steady_clock;

  ProcessSupervisor(std::vector<std::string> coordinator_args, std::vector<std::vector<std::string>> worker_args);
  // SIGKILLs and reaps whatever still runs (Stop() is the orderly way).
  ~ProcessSupervisor();
  ProcessSupervisor(const ProcessSupervisor&) = delete;
  ProcessSupervisor& operator=(const ProcessSupervisor&) = delete;

  // Starts the coordinator, then every worker.
  absl::Status Start();

  // Reaps and restarts children until `stop_requests` (a count of SIGINT/SIGTERM) is
  // non-zero, or the coordinator dies. Returns false when the coordinator died, true on a
  // stop request.
  bool Supervise(const std::atomic<int>& stop_requests);

  // Stops what is left, coordinator first: SIGTERM, and while it drains its admitted
  // requests the workers keep running; each further stop request is passed on as another
  // SIGTERM (which cuts the drain short). The workers then get SIGTERM. Whatever outlives
  // its grace gets SIGKILL.
  void Stop(const std::atomic<int>& stop_requests, std::chrono::milliseconds coordinator_grace,
            std::chrono::milliseconds worker_grace);

 private:
  struct Child {
    std::string name;  // "the coordinator", "worker 3": how logs name it.
    std::vector<std::string> args;
    bool restartable = false;
    pid_t pid = -1;  // -1: not running.
    Clock::time_point started;
    bool restart_pending = false;
    Clock::time_point restart_at;
    RestartBackoff backoff;
  };

  void Launch(Child& child);
  // Reaps every child that has ended and logs why; schedules a restart of dead workers
  // when `restart`. Returns whether the coordinator was among them.
  bool ReapAll(bool restart);
  void RestartDue();
  // Waits until none of `children` runs or `deadline` passes, reaping all the while;
  // a new stop request sends `resend` to each again (0: none).
  void WaitFor(const std::vector<Child*>& children, Clock::time_point deadline, const std::atomic<int>& stop_requests,
               int resend);
  void KillAndReap(Child& child);

  std::vector<Child> children_;  // [0] is the coordinator.
};

}  // namespace tessera::cli

#endif  // TESSERA_TOOLS_TESSERA_PROCESS_SUPERVISOR_H_
