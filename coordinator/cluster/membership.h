#ifndef TESSERA_COORDINATOR_CLUSTER_MEMBERSHIP_H_
#define TESSERA_COORDINATOR_CLUSTER_MEMBERSHIP_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tessera/v1/worker.pb.h"

namespace tessera {

// One registered worker as the cluster manager tracks it.
struct WorkerSession {
  v1::RegisterWorkerRequest registration;
  uint64_t order = 0;  // Registration order (a later registration is fresher).
  std::chrono::steady_clock::time_point last_seen;
  int replica = -1;  // -1: waiting for a group; else the replica it is forming or serving.
};

// Picks the members of `replica` (tp of them, by rank) from the waiting workers: those
// whose replica hint is `replica`, then those without one. A worker with a rank hint takes
// only that rank (the freshest registration wins a contested rank); workers without one
// fill the free ranks in registration order. Returns worker ids by rank, or nothing when
// the waiting workers cannot fill every rank.
std::optional<std::vector<std::string>> PickGroup(const std::map<std::string, WorkerSession>& workers,
                                                  int replica, int tp);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CLUSTER_MEMBERSHIP_H_
