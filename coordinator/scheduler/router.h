#ifndef TESSERA_COORDINATOR_SCHEDULER_ROUTER_H_
#define TESSERA_COORDINATOR_SCHEDULER_ROUTER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "coordinator/scheduler/scheduler.h"
#include "coordinator/scheduler/sequence.h"

namespace tessera::sched {

struct RouterOptions {
  // Blocks of load worth one block of prefill; higher spreads load, lower chases prefixes.
  double load_weight = 1.0;
  // What loading one block from the host tier costs, in blocks of prefill: a copy of its
  // KV instead of a forward pass over its tokens.
  double host_hit_cost = 0.1;
};

// KV-aware routing between replicas, each with its own scheduler and block pool. A
// sequence stays on the replica it was routed to for its whole life.
//   cost = (prompt blocks minus that replica's prefix-cache hits)
//        + host_hit_cost * (the hits in its host tier, counted as hits above)
//        + load_weight * (blocks in use + blocks its queued prompts need)
// The lowest cost wins; ties go to the lower index.
class Router {
 public:
  // The schedulers are not owned and must outlive the router.
  explicit Router(std::vector<Scheduler*> replicas, RouterOptions options = {});

  double Cost(int replica, absl::Span<const int32_t> prompt_token_ids) const;
  // Index of the cheapest replica; -1 when there is none.
  int Route(absl::Span<const int32_t> prompt_token_ids) const;
  // Routes and queues the request; returns the replica index.
  absl::StatusOr<int> AddRequest(Request request);

  int num_replicas() const { return static_cast<int>(replicas_.size()); }
  Scheduler& replica(int index) { return *replicas_[index]; }

 private:
  std::vector<Scheduler*> replicas_;
  RouterOptions options_;
};

}  // namespace tessera::sched

#endif  // TESSERA_COORDINATOR_SCHEDULER_ROUTER_H_
