#ifndef TESSERA_COORDINATOR_METRICS_ENGINE_METRICS_H_
#define TESSERA_COORDINATOR_METRICS_ENGINE_METRICS_H_

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "coordinator/metrics/readiness.h"
#include "coordinator/scheduler/scheduler.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace tessera {

struct EngineMetricsConfig {
  std::string model;
  std::string dtype;
  int block_size = 16;
  int tp = 1;
  int replicas = 1;
  std::string quantization = "none";
  std::string kv_cache_dtype = "fp32";
  uint64_t kv_cache_bytes_per_token = 0;
};

// Everything the coordinator knows about one request when it ends.
struct FinishedRequestRecord {
  std::string request_id;
  std::string protocol = "grpc";  // The front door: "grpc" or "http".
  int replica = -1;
  std::string finish_reason;  // sched::FinishReasonName().
  int prompt_tokens = 0;
  int generation_tokens = 0;
  int cached_prompt_tokens = 0;
  double queue_seconds = 0;                // Arrival to first scheduled (or to the end).
  std::optional<double> ttft_seconds;      // Arrival to first token; none without tokens.
  std::optional<double> prefill_seconds;   // First scheduled to first token.
  std::optional<double> decode_seconds;    // First token to the end.
  double e2e_seconds = 0;                  // Arrival to the end.
};

// The coordinator's Prometheus metrics (names in README.md, "Metrics"). The engine thread
// reports events; the HTTP server collects the registry from its own threads
// (prometheus-cpp metrics are atomic). Labels: model on everything, replica where a
// replica is known, protocol (grpc or http) on the request counters.
class EngineMetrics {
 public:
  explicit EngineMetrics(EngineMetricsConfig config);

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }
  Readiness& readiness() { return readiness_; }

  // Engine thread only.
  // `role`: "both", "prefill" or "decode" (disaggregated serving).
  void ReplicaAdded(int replica, int world_size, absl::string_view role = "both");
  void ReplicaFailed(int replica, absl::string_view reason);
  void StepSucceeded(int replica, int num_scheduled_tokens);
  void TokenEmitted(int replica, double seconds_since_previous_token);
  // One sequence's speculative step: tokens proposed, and how many the target accepted.
  void SpeculationObserved(int replica, int num_proposed, int num_accepted);
  void RequestFinished(const FinishedRequestRecord& r);
  void UpdateScheduler(int replica, const sched::SchedulerStats& stats);
  // A KV transfer from a prefill replica to a decode replica ended; `bytes` over all ranks.
  void KvTransferFinished(bool ok, uint64_t bytes, double seconds);
  void LoopTick() { readiness_.LoopTick(); }

  // Any thread: a request refused before it reached a scheduler ("invalid_argument",
  // "unavailable", "unschedulable", ...), by the front door it came through.
  void RequestRejected(absl::string_view reason, absl::string_view protocol);
  // Any thread: an admitted request the server ended early ("client_not_reading").
  void RequestAborted(absl::string_view reason, absl::string_view protocol);
  // Any thread (the cluster manager): workers registered and waiting for a group, and a
  // count of membership events ("registered", "expired", "dissolved", "formed",
  // "form_failed").
  void SetPendingWorkers(int n) { pending_workers_->Set(n); }
  void MembershipEvent(absl::string_view event);

 private:
  struct PerReplica {
    prometheus::Histogram* ttft;
    prometheus::Histogram* itl;
    prometheus::Histogram* tpot;
    prometheus::Histogram* e2e;
    prometheus::Histogram* queue;
    prometheus::Histogram* prefill;
    prometheus::Histogram* decode;
    prometheus::Histogram* prompt_tokens;
    prometheus::Histogram* generation_tokens;
    prometheus::Histogram* tokens_per_step;
    prometheus::Histogram* acceptance_length;
    prometheus::Counter* drafts;
    prometheus::Counter* draft_tokens;
    prometheus::Counter* accepted_tokens;
    prometheus::Counter* prompt_tokens_total;
    prometheus::Counter* generation_tokens_total;
    prometheus::Counter* preemptions;
    prometheus::Counter* prefix_queries;
    prometheus::Counter* prefix_hits;
    prometheus::Gauge* running;
    prometheus::Gauge* waiting;
    prometheus::Gauge* kv_usage;
    prometheus::Gauge* kv_free_blocks;
    prometheus::Counter* host_hits;
    prometheus::Counter* host_saved;
    prometheus::Counter* host_loaded;
    prometheus::Gauge* host_blocks;
    prometheus::Gauge* host_capacity;
    prometheus::Gauge* handoffs_held;
    prometheus::Gauge* handoffs_transferring;
    prometheus::Gauge* role = nullptr;
    // Scheduler counters seen last; a new scheduler (re-formed replica) starts at zero.
    int64_t seen_preemptions = 0;
    int64_t seen_queried = 0;
    int64_t seen_hits = 0;
    int64_t seen_host_hits = 0;
    int64_t seen_host_saved = 0;
    int64_t seen_host_loaded = 0;
  };
  PerReplica& Replica(int replica);
  void UpdateGroupGauges();

  const EngineMetricsConfig config_;
  std::shared_ptr<prometheus::Registry> registry_;
  Readiness readiness_;

  prometheus::Family<prometheus::Histogram>* ttft_;
  prometheus::Family<prometheus::Histogram>* itl_;
  prometheus::Family<prometheus::Histogram>* tpot_;
  prometheus::Family<prometheus::Histogram>* e2e_;
  prometheus::Family<prometheus::Histogram>* queue_;
  prometheus::Family<prometheus::Histogram>* prefill_;
  prometheus::Family<prometheus::Histogram>* decode_;
  prometheus::Family<prometheus::Histogram>* prompt_tokens_;
  prometheus::Family<prometheus::Histogram>* generation_tokens_;
  prometheus::Family<prometheus::Histogram>* tokens_per_step_;
  prometheus::Family<prometheus::Histogram>* acceptance_length_;
  prometheus::Family<prometheus::Counter>* drafts_;
  prometheus::Family<prometheus::Counter>* draft_tokens_;
  prometheus::Family<prometheus::Counter>* accepted_tokens_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Counter>* prompt_tokens_total_;
  prometheus::Family<prometheus::Counter>* generation_tokens_total_;
  prometheus::Family<prometheus::Counter>* preemptions_;
  prometheus::Family<prometheus::Counter>* prefix_queries_;
  prometheus::Family<prometheus::Counter>* prefix_hits_;
  prometheus::Family<prometheus::Counter>* rejected_;
  prometheus::Family<prometheus::Counter>* aborted_;
  prometheus::Family<prometheus::Gauge>* running_;
  prometheus::Family<prometheus::Gauge>* waiting_;
  prometheus::Family<prometheus::Gauge>* kv_usage_;
  prometheus::Family<prometheus::Gauge>* kv_free_blocks_;
  prometheus::Family<prometheus::Counter>* host_hits_;
  prometheus::Family<prometheus::Counter>* host_saved_;
  prometheus::Family<prometheus::Counter>* host_loaded_;
  prometheus::Family<prometheus::Gauge>* host_blocks_;
  prometheus::Family<prometheus::Gauge>* host_capacity_;
  prometheus::Family<prometheus::Gauge>* handoffs_;
  prometheus::Family<prometheus::Gauge>* role_;
  prometheus::Family<prometheus::Counter>* transfers_;
  prometheus::Counter* transfer_bytes_;
  prometheus::Histogram* transfer_seconds_;
  prometheus::Gauge* workers_live_;
  prometheus::Gauge* groups_complete_;
  prometheus::Gauge* pending_workers_;
  prometheus::Family<prometheus::Counter>* membership_;

  std::map<int, PerReplica> replicas_;  // Engine thread only.
  std::map<int, int> live_groups_;      // Replica -> world size, for formed replicas.
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_METRICS_ENGINE_METRICS_H_
