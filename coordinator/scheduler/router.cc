#include "coordinator/scheduler/router.h"

#include <utility>

#include "absl/status/status.h"

namespace tessera::sched {

Router::Router(std::vector<Scheduler*> replicas, RouterOptions options)
    : replicas_(std::move(replicas)), options_(options) {}

double Router::Cost(int replica, absl::Span<const int32_t> prompt_token_ids) const {
  const Scheduler& scheduler = *replicas_[replica];
  const KVCacheManager& kv = scheduler.kv_cache_manager();
  const ComputedBlocks hits = kv.GetComputedBlocks(prompt_token_ids);
  const int num_host_hits = static_cast<int>(hits.host_slots.size());
  const int num_to_compute = kv.NumBlocksFor(static_cast<int>(prompt_token_ids.size())) -
                             static_cast<int>(hits.block_ids.size()) - num_host_hits;
  const int load = kv.pool().num_used_blocks() + scheduler.num_queued_prompt_blocks();
  return num_to_compute + options_.host_hit_cost * num_host_hits + options_.load_weight * load;
}

int Router::Route(absl::Span<const int32_t> prompt_token_ids) const {
  int best = -1;
  double best_cost = 0.0;
  for (int i = 0; i < num_replicas(); ++i) {
    const double cost = Cost(i, prompt_token_ids);
    if (best < 0 || cost < best_cost) {
      best = i;
      best_cost = cost;
    }
  }
  return best;
}

absl::StatusOr<int> Router::AddRequest(Request request) {
  const int replica = Route(request.prompt_token_ids);
  if (replica < 0) return absl::UnavailableError("no replica to route the request to");
  absl::Status status = replicas_[replica]->AddRequest(std::move(request));
  if (!status.ok()) return status;
  return replica;
}

}  // namespace tessera::sched
