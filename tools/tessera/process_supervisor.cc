#include "tools/tessera/process_supervisor.h"

#include <signal.h>
#include <sys/wait.h>

#include <cstdio>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/tessera/spawn_child.h"

namespace tessera::cli {
namespace {

// How often the main loop looks for dead children and due restarts: a dead worker is
// noticed within this, well under its first backoff.
constexpr std::chrono::milliseconds kPollInterval(50);

void Say(const std::string& line) { std::fprintf(stderr, "tessera serve: %s\n", line.c_str()); }

double Seconds(std::chrono::milliseconds d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

ProcessSupervisor::ProcessSupervisor(std::vector<std::string> coordinator_args,
                                     std::vector<std::vector<std::string>> worker_args) {
  Child coordinator;
  coordinator.name = "the coordinator";
  coordinator.args = std::move(coordinator_args);
  children_.push_back(std::move(coordinator));
  for (size_t w = 0; w < worker_args.size(); ++w) {
    Child worker;
    worker.name = absl::StrCat("worker ", w);
    worker.args = std::move(worker_args[w]);
    worker.restartable = true;
    children_.push_back(std::move(worker));
  }
}

ProcessSupervisor::~ProcessSupervisor() {
  for (Child& child : children_) KillAndReap(child);
}

absl::Status ProcessSupervisor::Start() {
  Launch(children_[0]);
  if (children_[0].pid < 0) return absl::InternalError(absl::StrCat("cannot fork ", children_[0].args[0]));
  for (size_t i = 1; i < children_.size(); ++i) {
    Launch(children_[i]);
    if (children_[i].pid < 0) {
      // A failed fork (out of processes) is retried like a death.
      Child& worker = children_[i];
      worker.restart_pending = true;
      worker.restart_at = Clock::now() + worker.backoff.NextDelay(std::chrono::milliseconds(0));
    }
  }
  return absl::OkStatus();
}

void ProcessSupervisor::Launch(Child& child) {
  child.restart_pending = false;
  child.pid = SpawnChild(child.args);
  child.started = Clock::now();
}

bool ProcessSupervisor::Supervise(const std::atomic<int>& stop_requests) {
  while (stop_requests.load() == 0) {
    if (ReapAll(/*restart=*/true)) return false;
    RestartDue();
    std::this_thread::sleep_for(kPollInterval);
  }
  return true;
}

bool ProcessSupervisor::ReapAll(bool restart) {
  bool coordinator_died = false;
  int status = 0;
  pid_t pid;
  while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
    for (size_t i = 0; i < children_.size(); ++i) {
      Child& child = children_[i];
      if (child.pid != pid) continue;
      child.pid = -1;
      const auto uptime = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - child.started);
      std::string line = absl::StrCat(child.name, " (pid ", pid, ") ", restart ? "died" : "stopped", " (",
                                      DescribeWaitStatus(status), ") after ",
                                      absl::StrFormat("%.1f s", Seconds(uptime)));
      if (i == 0) {
        coordinator_died = true;
      } else if (restart && child.restartable) {
        const auto delay = child.backoff.NextDelay(uptime);
        child.restart_pending = true;
        child.restart_at = Clock::now() + delay;
        absl::StrAppend(&line, "; restarting it in ", absl::StrFormat("%.1f s", Seconds(delay)));
      }
      Say(line);
    }
  }
  return coordinator_died;
}

void ProcessSupervisor::RestartDue() {
  const auto now = Clock::now();
  for (Child& child : children_) {
    if (!child.restart_pending || now < child.restart_at) continue;
    Launch(child);
    if (child.pid < 0) {
      child.restart_pending = true;
      child.restart_at = now + child.backoff.NextDelay(std::chrono::milliseconds(0));
      Say(absl::StrCat("cannot fork ", child.name, "; trying again later"));
      continue;
    }
    Say(absl::StrCat("restarted ", child.name, " (pid ", child.pid, ") with the same flags"));
  }
}

void ProcessSupervisor::Stop(const std::atomic<int>& stop_requests, std::chrono::milliseconds coordinator_grace,
                             std::chrono::milliseconds worker_grace) {
  for (Child& child : children_) child.restart_pending = false;
  Child& coordinator = children_[0];
  if (coordinator.pid > 0) {
    ::kill(coordinator.pid, SIGTERM);
    WaitFor({&coordinator}, Clock::now() + coordinator_grace, stop_requests, SIGTERM);
    if (coordinator.pid > 0) {
      Say(absl::StrCat("the coordinator did not stop within ", absl::StrFormat("%.0f s", Seconds(coordinator_grace)),
                       "; killing it"));
      KillAndReap(coordinator);
    }
  }
  std::vector<Child*> workers;
  for (size_t i = 1; i < children_.size(); ++i) {
    if (children_[i].pid > 0) {
      ::kill(children_[i].pid, SIGTERM);
      workers.push_back(&children_[i]);
    }
  }
  WaitFor(workers, Clock::now() + worker_grace, stop_requests, 0);
  for (Child* worker : workers) {
    if (worker->pid <= 0) continue;
    Say(absl::StrCat(worker->name, " did not stop within ", absl::StrFormat("%.0f s", Seconds(worker_grace)),
                     "; killing it"));
    KillAndReap(*worker);
  }
}

void ProcessSupervisor::WaitFor(const std::vector<Child*>& children, Clock::time_point deadline,
                                const std::atomic<int>& stop_requests, int resend) {
  int seen = stop_requests.load();
  while (Clock::now() < deadline) {
    ReapAll(/*restart=*/false);
    bool running = false;
    for (const Child* child : children) running = running || child->pid > 0;
    if (!running) return;
    if (const int now = stop_requests.load(); resend != 0 && now != seen) {
      seen = now;
      for (const Child* child : children) {
        if (child->pid > 0) ::kill(child->pid, resend);
      }
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

void ProcessSupervisor::KillAndReap(Child& child) {
  if (child.pid <= 0) return;
  ::kill(child.pid, SIGKILL);
  ::waitpid(child.pid, nullptr, 0);
  child.pid = -1;
}

}  // namespace tessera::cli
