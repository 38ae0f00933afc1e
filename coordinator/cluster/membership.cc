#include "coordinator/cluster/membership.h"

#include <algorithm>

namespace tessera {

std::optional<std::vector<std::string>> PickGroup(const std::map<std::string, WorkerSession>& workers,
                                                  int replica, int tp) {
  std::vector<const std::pair<const std::string, WorkerSession>*> hinted, any;
  for (const auto& entry : workers) {
    const WorkerSession& w = entry.second;
    if (w.replica >= 0) continue;
    const int hint = w.registration.replica_hint();
    if (hint == replica) hinted.push_back(&entry);
    if (hint < 0) any.push_back(&entry);
  }
  // Hinted workers first, then the unhinted; within each the freshest first for a
  // contested rank hint, and registration order for the free ranks (below).
  auto fresher = [](const auto* a, const auto* b) { return a->second.order > b->second.order; };
  std::sort(hinted.begin(), hinted.end(), fresher);
  std::sort(any.begin(), any.end(), fresher);
  std::vector<const std::pair<const std::string, WorkerSession>*> candidates = hinted;
  candidates.insert(candidates.end(), any.begin(), any.end());

  std::vector<std::string> by_rank(tp);
  std::vector<const std::pair<const std::string, WorkerSession>*> free_agents;
  for (const auto* c : candidates) {
    const int rank = c->second.registration.rank_hint();
    if (rank < 0 || rank >= tp) {
      free_agents.push_back(c);
    } else if (by_rank[rank].empty()) {
      by_rank[rank] = c->first;
    }
  }
  // Free ranks go to hinted-replica workers before unhinted ones, oldest first.
  std::stable_sort(free_agents.begin(), free_agents.end(), [replica](const auto* a, const auto* b) {
    const bool ha = a->second.registration.replica_hint() == replica;
    const bool hb = b->second.registration.replica_hint() == replica;
    if (ha != hb) return ha;
    return a->second.order < b->second.order;
  });
  size_t next = 0;
  for (int r = 0; r < tp; ++r) {
    if (!by_rank[r].empty()) continue;
    if (next == free_agents.size()) return std::nullopt;
    by_rank[r] = free_agents[next++]->first;
  }
  return by_rank;
}

}  // namespace tessera
