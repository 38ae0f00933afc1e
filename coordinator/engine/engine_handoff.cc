// Disaggregated prefill and decode in the engine: which replicas take new requests, and
// the handoff of a prefilled sequence to a decode replica with its KV transfer.
//
// A request starting on a prefill replica runs there with prefill_only: its first token
// streams to the client at once, and the sequence is held with its blocks (HeldSeq). The
// loop then gives it to the decode replica the router finds cheapest (load, and prefix
// blocks it already caches, which are not sent); AddHandoff allocates the decode side's
// blocks, the request's replica becomes the decode replica, and the prefill ranks push the
// blocks to the decode ranks while both replicas go on stepping. When the transfer ends
// the prefill side releases its blocks and the decode side starts decoding, or, if the
// transfer failed, recomputes the prompt itself: the request completes either way.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "coordinator/engine/engine.h"
#include "coordinator/metrics/engine_metrics.h"
#include "coordinator/scheduler/router.h"

namespace tessera {

ReplicaRole Engine::RoleOf(int replica) const {
  return replica < static_cast<int>(options_.replica_roles.size()) ? options_.replica_roles[replica]
                                                                    : ReplicaRole::kBoth;
}

std::vector<Engine::Replica*> Engine::EntryReplicas() {
  std::vector<Replica*> all, entry;
  for (auto& r : replicas_) {
    if (r == nullptr || !r->ready) continue;
    all.push_back(r.get());
    if (r->role != ReplicaRole::kDecode) entry.push_back(r.get());
  }
  const bool any_prefill = std::any_of(entry.begin(), entry.end(),
                                       [](const Replica* r) { return r->role == ReplicaRole::kPrefill; });
  return any_prefill ? entry : all;
}

bool Engine::HandsOff(const Replica& r) const {
  if (r.role != ReplicaRole::kPrefill) return false;
  for (const auto& d : replicas_) {
    if (d != nullptr && d->ready && d.get() != &r && d->role != ReplicaRole::kPrefill &&
        d->group->world_size() == r.group->world_size()) {
      return true;
    }
  }
  return false;
}

void Engine::PlaceHeldSequences() {
  for (auto& t : transfers_) {
    if (t.valid() && t.wait_for(std::chrono::seconds(0)) == std::future_status::ready) t.get();
  }
  std::erase_if(transfers_, [](const std::future<void>& t) { return !t.valid(); });
  // In order, so an early sequence is not passed by later ones for the same room.
  while (!held_.empty() && Place(held_.front())) held_.pop_front();
}

bool Engine::Place(const HeldSeq& held) {
  Replica* src = replicas_[held.src].get();
  auto live_it = live_.find(held.seq_id);
  const sched::Sequence* seq = src != nullptr && src->epoch == held.src_epoch && src->ready
                                   ? src->scheduler->GetSequence(held.seq_id)
                                   : nullptr;
  // Gone meanwhile: cancelled (its blocks went with it), or its replica failed.
  if (seq == nullptr || seq->status != sched::SequenceStatus::kHeld) return true;
  if (live_it == live_.end()) {
    src->scheduler->ReleaseHeld(held.seq_id).IgnoreError();
    return true;
  }
  Live& live = live_it->second;
  std::vector<sched::Scheduler*> schedulers;
  std::vector<Replica*> candidates;
  for (auto& d : replicas_) {
    if (d != nullptr && d->ready && d.get() != src && d->role != ReplicaRole::kPrefill &&
        d->group->world_size() == src->group->world_size()) {
      schedulers.push_back(d->scheduler.get());
      candidates.push_back(d.get());
    }
  }
  if (candidates.empty()) {
    // No replica decodes any more: this one does, from the KV it already has.
    src->scheduler->ResumeHeld(held.seq_id).IgnoreError();
    return true;
  }
  const std::vector<int32_t> output(seq->token_ids.begin() + seq->num_prompt_tokens, seq->token_ids.end());
  sched::Router router(schedulers, {options_.router_load_weight});
  std::vector<int> order(candidates.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::vector<double> cost(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) cost[i] = router.Cost(static_cast<int>(i), live.request.prompt);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return cost[a] < cost[b]; });
  for (int i : order) {
    Replica* dst = candidates[i];
    sched::Request req;
    req.seq_id = held.seq_id;
    req.prompt_token_ids = live.request.prompt;
    req.options = live.request.options;
    req.options.sampling_handle = held.seq_id;
    absl::StatusOr<sched::Handoff> handoff = dst->scheduler->AddHandoff(std::move(req), output);
    if (absl::IsResourceExhausted(handoff.status())) continue;  // Full for now.
    if (!handoff.ok()) {
      // The decode replica refuses the request itself (a smaller context, say): decode here.
      Log(LogLevel::kWarning, "tessera-coordinator", "handoff refused; decoding on the prefill replica",
          {{"request_id", live.request.request_id}, {"error", std::string(handoff.status().message())}});
      src->scheduler->ResumeHeld(held.seq_id).IgnoreError();
      return true;
    }
    absl::Span<const sched::BlockId> table = src->scheduler->kv_cache_manager().BlockTable(held.seq_id);
    std::vector<int32_t> src_blocks(table.begin() + handoff->first_block, table.end());
    std::vector<int32_t> dst_blocks(handoff->block_ids.begin(), handoff->block_ids.end());
    live.replica = dst->index;
    TransferDone done{held.seq_id, src->index, src->epoch, dst->index, dst->epoch, uint64_t{0}, 0.0};
    if (src_blocks.empty()) {  // The decode replica caches the whole prompt already.
      Post(std::move(done));
      return true;
    }
    transfers_.push_back(std::async(
        std::launch::async, [this, group = src->group, addresses = dst->group->addresses(),
                             formation = dst->group->formation(), src_blocks = std::move(src_blocks),
                             dst_blocks = std::move(dst_blocks), done = std::move(done)]() mutable {
          const auto start = std::chrono::steady_clock::now();
          done.bytes = group->PushKv(addresses, formation, src_blocks, dst_blocks);
          done.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          Post(std::move(done));
        }));
    return true;
  }
  return false;
}

void Engine::Handle(TransferDone& m) {
  Replica* src = replicas_[m.src].get();
  if (src != nullptr && src->epoch == m.src_epoch && src->scheduler != nullptr) {
    src->scheduler->ReleaseHeld(m.seq_id).IgnoreError();
  }
  if (options_.metrics != nullptr) {
    options_.metrics->KvTransferFinished(m.bytes.ok(), m.bytes.ok() ? *m.bytes : 0, m.seconds);
  }
  Replica* dst = replicas_[m.dst].get();
  // A decode replica that failed meanwhile failed the request with it.
  if (dst == nullptr || dst->epoch != m.dst_epoch || !dst->ready) return;
  if (!m.bytes.ok()) {
    auto it = live_.find(m.seq_id);
    Log(LogLevel::kWarning, "tessera-coordinator", "KV transfer failed; the decode replica recomputes the prompt",
        {{"request_id", it != live_.end() ? it->second.request.request_id : std::string()},
         {"from_replica", int64_t{m.src}},
         {"to_replica", int64_t{m.dst}},
         {"error", std::string(m.bytes.status().message())}});
  }
  dst->scheduler->HandoffDone(m.seq_id, m.bytes.ok()).IgnoreError();
}

}  // namespace tessera
