#include "coordinator/metrics/engine_metrics.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

using prometheus::Histogram;

// Bucket layouts follow vLLM's, so dashboards and SLOs carry over.
const Histogram::BucketBoundaries& LatencyBuckets() {
  static const Histogram::BucketBoundaries b = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                                0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
  return b;
}
const Histogram::BucketBoundaries& TokenLatencyBuckets() {
  static const Histogram::BucketBoundaries b = {0.001, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075,
                                                0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0};
  return b;
}
const Histogram::BucketBoundaries& RequestBuckets() {
  static const Histogram::BucketBoundaries b = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                                                15.0, 20.0, 30.0, 60.0, 120.0, 240.0, 480.0, 960.0};
  return b;
}
const Histogram::BucketBoundaries& CountBuckets() {
  static const Histogram::BucketBoundaries b = [] {
    Histogram::BucketBoundaries v;
    for (double x = 1; x <= 65536; x *= 2) v.push_back(x);
    return v;
  }();
  return b;
}

// Tokens one speculative step gives a sequence: 1 + accepted proposals.
const Histogram::BucketBoundaries& AcceptanceLengthBuckets() {
  static const Histogram::BucketBoundaries b = {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16};
  return b;
}

prometheus::Family<Histogram>* Hist(prometheus::Registry& r, const char* name, const char* help) {
  return &prometheus::BuildHistogram().Name(name).Help(help).Register(r);
}
prometheus::Family<prometheus::Counter>* Count(prometheus::Registry& r, const char* name, const char* help) {
  return &prometheus::BuildCounter().Name(name).Help(help).Register(r);
}
prometheus::Family<prometheus::Gauge>* Gauge(prometheus::Registry& r, const char* name, const char* help) {
  return &prometheus::BuildGauge().Name(name).Help(help).Register(r);
}

}  // namespace

EngineMetrics::EngineMetrics(EngineMetricsConfig config)
    : config_(std::move(config)), registry_(std::make_shared<prometheus::Registry>()) {
  auto& r = *registry_;
  ttft_ = Hist(r, "tessera_time_to_first_token_seconds", "Arrival to first generated token, per request.");
  itl_ = Hist(r, "tessera_inter_token_latency_seconds", "Time between consecutive tokens of a request.");
  tpot_ = Hist(r, "tessera_time_per_output_token_seconds",
               "(e2e - TTFT) / (generated tokens - 1), per request with at least 2 tokens.");
  e2e_ = Hist(r, "tessera_e2e_request_latency_seconds", "Arrival to finish, per request.");
  queue_ = Hist(r, "tessera_request_queue_time_seconds", "Arrival to first scheduled step, per request.");
  prefill_ = Hist(r, "tessera_request_prefill_time_seconds", "First scheduled step to first token, per request.");
  decode_ = Hist(r, "tessera_request_decode_time_seconds", "First token to finish, per request.");
  prompt_tokens_ = Hist(r, "tessera_request_prompt_tokens", "Prompt tokens per finished request.");
  generation_tokens_ = Hist(r, "tessera_request_generation_tokens", "Generated tokens per finished request.");
  tokens_per_step_ = Hist(r, "tessera_tokens_per_step", "Tokens computed per engine step (prefill + decode).");
  acceptance_length_ = Hist(r, "tessera_spec_decode_acceptance_length",
                            "Tokens a sequence gained per speculative step (1 + accepted proposals).");
  drafts_ = Count(r, "tessera_spec_decode_num_drafts_total", "Speculative proposals (sequence-steps with one).");
  draft_tokens_ = Count(r, "tessera_spec_decode_num_draft_tokens_total", "Tokens proposed for speculation.");
  accepted_tokens_ = Count(r, "tessera_spec_decode_num_accepted_tokens_total",
                           "Proposed tokens the target model accepted.");
  requests_ = Count(r, "tessera_requests_total", "Finished requests by finish reason.");
  prompt_tokens_total_ = Count(r, "tessera_prompt_tokens_total", "Prompt tokens of finished requests.");
  generation_tokens_total_ = Count(r, "tessera_generation_tokens_total", "Generated tokens of finished requests.");
  preemptions_ = Count(r, "tessera_preemptions_total", "Sequences preempted (blocks freed, recomputed later).");
  prefix_queries_ = Count(r, "tessera_prefix_cache_queries_tokens_total", "Prompt tokens looked up in the prefix cache.");
  prefix_hits_ = Count(r, "tessera_prefix_cache_hits_tokens_total", "Prompt tokens served by the prefix cache.");
  rejected_ = Count(r, "tessera_rejected_requests_total", "Requests refused before scheduling, by reason.");
  aborted_ = Count(r, "tessera_aborted_requests_total",
                   "Admitted requests the server ended early, by reason (client_not_reading).");
  running_ = Gauge(r, "tessera_num_requests_running", "Sequences in the running queue.");
  waiting_ = Gauge(r, "tessera_num_requests_waiting", "Sequences waiting to be scheduled.");
  kv_usage_ = Gauge(r, "tessera_kv_cache_usage_ratio", "Share of usable KV-cache blocks in use (0-1).");
  kv_free_blocks_ = Gauge(r, "tessera_kv_cache_free_blocks", "Free KV-cache blocks.");
  host_hits_ = Count(r, "tessera_kv_host_tier_hits_tokens_total",
                     "Prompt tokens loaded from the host KV tier instead of recomputed (also counted in "
                     "tessera_prefix_cache_hits_tokens_total).");
  host_saved_ = Count(r, "tessera_kv_host_tier_saved_blocks_total",
                      "KV blocks evicted from the device pool and saved to the host tier.");
  host_loaded_ = Count(r, "tessera_kv_host_tier_loaded_blocks_total", "KV blocks loaded from the host tier.");
  host_blocks_ = Gauge(r, "tessera_kv_host_tier_blocks", "Host-tier KV blocks holding a cached block.");
  host_capacity_ = Gauge(r, "tessera_kv_host_tier_capacity_blocks", "Host-tier KV blocks in all (0: no host tier).");
  handoffs_ = Gauge(r, "tessera_kv_handoffs",
                    "Disaggregated serving: sequences held for a KV transfer out (state=held, prefill replica) "
                    "and waiting for one to land (state=transferring, decode replica).");
  role_ = Gauge(r, "tessera_replica_role", "A formed replica's role (value 1): both, prefill or decode.");
  transfers_ = Count(r, "tessera_kv_transfers_total",
                     "KV transfers from a prefill replica to a decode replica, by outcome (ok, failed).");
  transfer_bytes_ = &Count(r, "tessera_kv_transfer_bytes_total", "Bytes of KV moved between replicas, all ranks.")
                         ->Add({{"model", config_.model}});
  transfer_seconds_ = &Hist(r, "tessera_kv_transfer_seconds",
                            "Time a KV transfer takes, from its start on the prefill ranks to its last block landing on the decode ranks.")
                           ->Add({{"model", config_.model}}, LatencyBuckets());
  workers_live_ = &Gauge(r, "tessera_workers_live", "Workers in formed, healthy groups.")->Add({{"model", config_.model}});
  groups_complete_ = &Gauge(r, "tessera_groups_complete", "Replicas whose group is formed and healthy.")
                          ->Add({{"model", config_.model}});
  pending_workers_ = &Gauge(r, "tessera_cluster_pending_workers",
                            "Registered workers waiting for a group (or spares).")
                          ->Add({{"model", config_.model}});
  membership_ = Count(r, "tessera_cluster_membership_events_total",
                      "Worker membership events (registered, expired, dissolved, formed, form_failed).");
  Gauge(r, "tessera_config_info", "Serving configuration (value 1).")
      ->Add({{"model", config_.model},
             {"dtype", config_.dtype},
             {"block_size", absl::StrCat(config_.block_size)},
             {"tp", absl::StrCat(config_.tp)},
             {"replicas", absl::StrCat(config_.replicas)},
             {"quantization", config_.quantization},
             {"kv_cache_dtype", config_.kv_cache_dtype}})
      .Set(1);
  Gauge(r, "tessera_kv_cache_bytes_per_token",
        "Bytes of K and V one token takes in the KV cache, all layers and heads.")
      ->Add({{"model", config_.model}})
      .Set(static_cast<double>(config_.kv_cache_bytes_per_token));
}

EngineMetrics::PerReplica& EngineMetrics::Replica(int replica) {
  auto it = replicas_.find(replica);
  if (it != replicas_.end()) return it->second;
  const prometheus::Labels l = {{"model", config_.model}, {"replica", absl::StrCat(replica)}};
  PerReplica p;
  p.ttft = &ttft_->Add(l, LatencyBuckets());
  p.itl = &itl_->Add(l, TokenLatencyBuckets());
  p.tpot = &tpot_->Add(l, TokenLatencyBuckets());
  p.e2e = &e2e_->Add(l, RequestBuckets());
  p.queue = &queue_->Add(l, RequestBuckets());
  p.prefill = &prefill_->Add(l, RequestBuckets());
  p.decode = &decode_->Add(l, RequestBuckets());
  p.prompt_tokens = &prompt_tokens_->Add(l, CountBuckets());
  p.generation_tokens = &generation_tokens_->Add(l, CountBuckets());
  p.tokens_per_step = &tokens_per_step_->Add(l, CountBuckets());
  p.acceptance_length = &acceptance_length_->Add(l, AcceptanceLengthBuckets());
  p.drafts = &drafts_->Add(l);
  p.draft_tokens = &draft_tokens_->Add(l);
  p.accepted_tokens = &accepted_tokens_->Add(l);
  p.prompt_tokens_total = &prompt_tokens_total_->Add(l);
  p.generation_tokens_total = &generation_tokens_total_->Add(l);
  p.preemptions = &preemptions_->Add(l);
  p.prefix_queries = &prefix_queries_->Add(l);
  p.prefix_hits = &prefix_hits_->Add(l);
  p.running = &running_->Add(l);
  p.waiting = &waiting_->Add(l);
  p.kv_usage = &kv_usage_->Add(l);
  p.kv_free_blocks = &kv_free_blocks_->Add(l);
  p.host_hits = &host_hits_->Add(l);
  p.host_saved = &host_saved_->Add(l);
  p.host_loaded = &host_loaded_->Add(l);
  p.host_blocks = &host_blocks_->Add(l);
  p.host_capacity = &host_capacity_->Add(l);
  prometheus::Labels held = l, transferring = l;
  held["state"] = "held";
  transferring["state"] = "transferring";
  p.handoffs_held = &handoffs_->Add(held);
  p.handoffs_transferring = &handoffs_->Add(transferring);
  return replicas_.emplace(replica, p).first->second;
}

void EngineMetrics::UpdateGroupGauges() {
  int workers = 0;
  for (const auto& [replica, size] : live_groups_) workers += size;
  workers_live_->Set(workers);
  groups_complete_->Set(static_cast<double>(live_groups_.size()));
}

void EngineMetrics::ReplicaAdded(int replica, int world_size, absl::string_view role) {
  PerReplica& p = Replica(replica);
  if (p.role != nullptr) role_->Remove(p.role);
  p.role = &role_->Add({{"model", config_.model}, {"replica", absl::StrCat(replica)}, {"role", std::string(role)}});
  p.role->Set(1);
  p.seen_preemptions = p.seen_queried = p.seen_hits = 0;
  live_groups_[replica] = world_size;
  UpdateGroupGauges();
  readiness_.ReplicaFormed(replica);
}

void EngineMetrics::ReplicaFailed(int replica, absl::string_view reason) {
  PerReplica& p = Replica(replica);
  p.running->Set(0);
  p.waiting->Set(0);
  p.kv_usage->Set(0);
  p.kv_free_blocks->Set(0);
  live_groups_.erase(replica);
  UpdateGroupGauges();
  readiness_.ReplicaFailed(replica, std::string(reason));
}

void EngineMetrics::StepSucceeded(int replica, int num_scheduled_tokens) {
  if (num_scheduled_tokens > 0) Replica(replica).tokens_per_step->Observe(num_scheduled_tokens);
  readiness_.StepSucceeded(replica);
}

void EngineMetrics::TokenEmitted(int replica, double seconds_since_previous_token) {
  Replica(replica).itl->Observe(seconds_since_previous_token);
}

void EngineMetrics::SpeculationObserved(int replica, int num_proposed, int num_accepted) {
  PerReplica& p = Replica(replica);
  p.drafts->Increment();
  p.draft_tokens->Increment(num_proposed);
  p.accepted_tokens->Increment(num_accepted);
  p.acceptance_length->Observe(1 + num_accepted);
}

void EngineMetrics::RequestFinished(const FinishedRequestRecord& r) {
  requests_
      ->Add({{"model", config_.model},
             {"replica", absl::StrCat(r.replica)},
             {"finish_reason", r.finish_reason},
             {"protocol", r.protocol}})
      .Increment();
  if (r.replica < 0) return;
  PerReplica& p = Replica(r.replica);
  p.prompt_tokens_total->Increment(r.prompt_tokens);
  p.generation_tokens_total->Increment(r.generation_tokens);
  p.prompt_tokens->Observe(r.prompt_tokens);
  p.generation_tokens->Observe(r.generation_tokens);
  p.e2e->Observe(r.e2e_seconds);
  p.queue->Observe(r.queue_seconds);
  if (r.ttft_seconds.has_value()) p.ttft->Observe(*r.ttft_seconds);
  if (r.prefill_seconds.has_value()) p.prefill->Observe(*r.prefill_seconds);
  if (r.decode_seconds.has_value()) p.decode->Observe(*r.decode_seconds);
  if (r.ttft_seconds.has_value() && r.generation_tokens > 1) {
    p.tpot->Observe(std::max(0.0, r.e2e_seconds - *r.ttft_seconds) / (r.generation_tokens - 1));
  }
}

void EngineMetrics::UpdateScheduler(int replica, const sched::SchedulerStats& s) {
  PerReplica& p = Replica(replica);
  p.running->Set(s.num_running);
  p.waiting->Set(s.num_waiting);
  p.kv_usage->Set(s.kv_cache_usage);
  p.kv_free_blocks->Set(s.num_free_blocks);
  // Counters only grow: add what the scheduler counted since the last look.
  auto advance = [](prometheus::Counter* c, int64_t now, int64_t& seen) {
    if (now > seen) c->Increment(static_cast<double>(now - seen));
    seen = std::max(seen, now);
  };
  advance(p.preemptions, s.num_preemptions, p.seen_preemptions);
  advance(p.prefix_queries, s.prefix_cache_queried_tokens, p.seen_queried);
  advance(p.prefix_hits, s.prefix_cache_hit_tokens, p.seen_hits);
  advance(p.host_hits, s.host_tier_hit_tokens, p.seen_host_hits);
  advance(p.host_saved, s.host_tier_saved_blocks, p.seen_host_saved);
  advance(p.host_loaded, s.host_tier_loaded_blocks, p.seen_host_loaded);
  p.host_blocks->Set(s.num_host_blocks_used);
  p.host_capacity->Set(s.num_host_blocks);
  p.handoffs_held->Set(s.num_held);
  p.handoffs_transferring->Set(s.num_transferring);
}

void EngineMetrics::KvTransferFinished(bool ok, uint64_t bytes, double seconds) {
  transfers_->Add({{"model", config_.model}, {"outcome", ok ? "ok" : "failed"}}).Increment();
  if (!ok) return;
  transfer_bytes_->Increment(static_cast<double>(bytes));
  transfer_seconds_->Observe(seconds);
}

void EngineMetrics::RequestRejected(absl::string_view reason, absl::string_view protocol) {
  rejected_->Add({{"model", config_.model}, {"reason", std::string(reason)}, {"protocol", std::string(protocol)}})
      .Increment();
}

void EngineMetrics::MembershipEvent(absl::string_view event) {
  membership_->Add({{"model", config_.model}, {"event", std::string(event)}}).Increment();
}

void EngineMetrics::RequestAborted(absl::string_view reason, absl::string_view protocol) {
  aborted_->Add({{"model", config_.model}, {"reason", std::string(reason)}, {"protocol", std::string(protocol)}})
      .Increment();
}

}  // namespace tessera
