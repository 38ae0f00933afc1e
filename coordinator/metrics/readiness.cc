#include "coordinator/metrics/readiness.h"

#include "absl/strings/str_cat.h"

namespace tessera {

void Readiness::LoopTick(Clock::time_point now) {
  absl::MutexLock lock(&mu_);
  ticked_ = true;
  last_tick_ = now;
}

void Readiness::ReplicaFormed(int replica) {
  absl::MutexLock lock(&mu_);
  Replica& r = replicas_[replica];
  r.formed = true;
  r.stepped = false;
}

void Readiness::StepSucceeded(int replica) {
  absl::MutexLock lock(&mu_);
  auto it = replicas_.find(replica);
  if (it != replicas_.end() && it->second.formed) it->second.stepped = true;
}

void Readiness::ReplicaFailed(int replica, std::string reason) {
  absl::MutexLock lock(&mu_);
  Replica& r = replicas_[replica];
  r.formed = false;
  r.stepped = false;
  r.last_failure = std::move(reason);
}

HealthResult Readiness::Live(Clock::time_point now) const {
  absl::MutexLock lock(&mu_);
  if (!ticked_) return {false, "the engine loop has not started"};
  const auto since = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_tick_);
  if (since > stall_limit_) {
    return {false, absl::StrCat("the engine loop has not ticked for ", since.count(), " ms")};
  }
  return {true, ""};
}

void Readiness::WatchListener(const net::ListenerStats* listener) {
  absl::MutexLock lock(&mu_);
  listeners_.push_back(listener);
}

HealthResult Readiness::Ready(Clock::time_point now) const {
  HealthResult live = Live(now);
  if (!live.ok) return live;
  absl::MutexLock lock(&mu_);
  for (const net::ListenerStats* l : listeners_) {
    if (!l->accepting.load()) {
      return {false, absl::StrCat("the ", l->name, " listener on port ", l->port.load(), " is not accepting connections")};
    }
  }
  int serving = 0, warming = 0;
  std::string failures;
  for (const auto& [index, r] : replicas_) {
    if (r.formed && r.stepped) ++serving;
    if (r.formed && !r.stepped) ++warming;
    if (!r.formed && !r.last_failure.empty()) {
      absl::StrAppend(&failures, failures.empty() ? "" : "; ", "replica ", index, ": ", r.last_failure);
    }
  }
  if (serving > 0) return {true, absl::StrCat(serving, " replica(s) serving")};
  std::string detail = warming > 0 ? absl::StrCat(warming, " replica(s) warming up, none has completed a step")
                                   : "no worker group is formed";
  if (!failures.empty()) absl::StrAppend(&detail, " (", failures, ")");
  return {false, detail};
}

int Readiness::num_serving() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [index, r] : replicas_) n += r.formed && r.stepped;
  return n;
}

}  // namespace tessera
