#ifndef TESSERA_COORDINATOR_ENGINE_ENGINE_H_
#define TESSERA_COORDINATOR_ENGINE_ENGINE_H_

#include <atomic>
#include <chrono>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/sampling_params.h"
#include "common/tokenizer/tokenizer.h"
#include "coordinator/cluster/worker_group.h"
#include "coordinator/engine/output_processor.h"
#include "coordinator/engine/replica_role.h"
#include "coordinator/engine/request_stream.h"
#include "coordinator/scheduler/scheduler.h"

namespace tessera {

class EngineMetrics;

struct EngineOptions {
  int block_size = 16;
  int max_num_batched_tokens = 2048;
  int max_num_seqs = 256;
  int max_model_len = 0;  // 0: the model's max_position_embeddings.
  sched::SchedulingPolicy policy = sched::SchedulingPolicy::kFcfs;
  bool enable_prefix_caching = true;
  double router_load_weight = 1.0;
  std::vector<int32_t> eos_token_ids;
  // Overload bounds per replica (0: none), see sched::SchedulerConfig: a request that no
  // replica's queue has room for is refused at once with RESOURCE_EXHAUSTED.
  int max_queued_requests = 0;
  int64_t max_queued_tokens = 0;
  int priority_aging_arrivals = 0;
  // Speculative slots per decoding sequence and step (0: no speculation); the workers'
  // proposer fills them (--speculative).
  int num_speculative_tokens = 0;
  // Disaggregated serving: each replica's role, by index (replicas past the list: both).
  std::vector<ReplicaRole> replica_roles;
  // Request metrics, readiness and the request log; not owned; null: none. With metrics
  // the engine runs a one-token warm-up generation on every replica it adds.
  EngineMetrics* metrics = nullptr;
};

// A validated, tokenized request ready for scheduling.
struct EngineRequest {
  std::string request_id;
  std::vector<int32_t> prompt;
  sched::RequestOptions options;
  SamplingParams sampling;
  std::vector<std::string> stop_strings;
  // The output's grammar (GBNF) when the request has a constraint; empty: free text. The
  // engine adds the end tokens (EOS and the request's stop token ids) for the workers.
  std::string grammar_gbnf;
  std::shared_ptr<RequestStream> stream;
  // The front door it came through ("grpc" or "http"): the `protocol` label of the
  // request metrics and a field of the request log.
  std::string protocol = "grpc";
  // The client's deadline: a request still queued then never starts, a running one stops
  // within the step (DEADLINE_EXCEEDED either way).
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

struct ReplicaSnapshot {
  int replica = 0;
  bool ready = false;
  int total_blocks = 0;
  int free_blocks = 0;
  int running = 0;
  int waiting = 0;
  ReplicaStartup startup;  // As its group formed.
  int host_total_blocks = 0;
  int host_used_blocks = 0;
  ReplicaRole role = ReplicaRole::kBoth;
};

// The coordinator's serving loop. One owner thread holds every replica's scheduler and
// all request state; RPC handlers and the cluster manager talk to it through an inbox.
// Each step: plan per idle replica, send the plan to its ranks (asynchronously), apply
// results as they return, stream deltas to the requests.
class Engine {
 public:
  Engine(const Tokenizer* tokenizer, EngineOptions options);
  ~Engine();

  // Starts serving on a newly formed group; replaces a failed replica of the same index.
  void AddReplica(std::unique_ptr<WorkerGroup> group, int num_blocks, int num_host_blocks = 0);
  // Fails every request of the replica with `reason` (UNAVAILABLE) and stops using it.
  void FailReplica(int replica, absl::Status reason);

  // Queues a request; UNAVAILABLE at once when no replica can serve. Returns the id the
  // engine knows it by (for Cancel).
  absl::StatusOr<uint64_t> Submit(EngineRequest request);
  void Cancel(uint64_t seq_id);

  int num_ready_replicas() const { return num_ready_.load(); }
  // Graceful shutdown: from now on Submit answers UNAVAILABLE ("draining"); requests
  // already admitted run to the end. Irreversible.
  void BeginDrain();
  bool draining() const { return draining_.load(); }
  // Requests admitted by Submit and not yet finished (queued, running or in the inbox).
  int num_active_requests() const { return active_requests_.load(); }
  EngineMetrics* metrics() const { return options_.metrics; }
  std::vector<ReplicaSnapshot> Snapshot() const;
  // Probes idle replicas' workers every `interval`; a rank that does not answer fails
  // its replica (the heartbeat).
  void set_heartbeat_interval(std::chrono::milliseconds interval) { heartbeat_ = interval; }
  void Stop();

 private:
  struct Replica {
    int index = 0;
    ReplicaRole role = ReplicaRole::kBoth;
    uint64_t epoch = 0;  // Which formation of the replica: a KV transfer outlives neither.
    std::shared_ptr<WorkerGroup> group;  // Shared with the KV transfers in flight.
    std::unique_ptr<sched::Scheduler> scheduler;
    bool ready = false;
    bool in_flight = false;
    sched::StepPlan plan;  // The plan in flight.
    std::future<void> call;  // The step or probe in flight.
    std::chrono::steady_clock::time_point last_contact;
  };
  struct Live {
    EngineRequest request;
    std::shared_ptr<const v1::GrammarConstraint> grammar;  // Null: unconstrained.
    int replica = -1;
    std::unique_ptr<OutputProcessor> output;
    std::chrono::steady_clock::time_point arrival;
    std::chrono::steady_clock::time_point first_scheduled;
    std::chrono::steady_clock::time_point first_token;
    std::chrono::steady_clock::time_point last_token;
    bool scheduled = false;
    bool admitted = false;  // Came through Submit, so counted in active_requests_.
    bool warmup = false;  // The engine's own warm-up request: no metrics, no log.
    int completion_tokens = 0;
    int cached_tokens = 0;
    std::multimap<std::chrono::steady_clock::time_point, uint64_t>::iterator deadline_entry;
    bool has_deadline = false;
  };
  struct StepDone {
    int replica;
    absl::StatusOr<v1::StepResponse> result;
  };
  struct NewRequest {
    uint64_t seq_id;
    EngineRequest request;
    std::chrono::steady_clock::time_point arrival;
  };
  struct ProbeDone {
    int replica;
    absl::Status status;
  };
  struct CancelRequest {
    uint64_t seq_id;
  };
  struct ReplicaAdded {
    std::unique_ptr<WorkerGroup> group;
    int num_blocks;
    int num_host_blocks;
  };
  struct ReplicaFailed {
    int replica;
    absl::Status reason;
  };
  // Disaggregated serving: a sequence whose prefill ended on `src`, held there until a
  // decode replica takes it (engine_handoff.cc).
  struct HeldSeq {
    uint64_t seq_id;
    int src;
    uint64_t src_epoch;
  };
  // Its KV transfer, from the first block the decode replica did not already cache.
  struct TransferDone {
    uint64_t seq_id;
    int src;
    uint64_t src_epoch;
    int dst;
    uint64_t dst_epoch;
    absl::StatusOr<uint64_t> bytes;
    double seconds;
  };
  using Message = std::variant<NewRequest, CancelRequest, StepDone, ProbeDone, ReplicaAdded, ReplicaFailed,
                               TransferDone>;

  void Post(Message m);
  void Loop();
  void Handle(NewRequest& m);
  void Handle(CancelRequest& m);
  void Handle(StepDone& m);
  void Handle(ProbeDone& m);
  void Handle(ReplicaAdded& m);
  void Handle(ReplicaFailed& m);
  void Handle(TransferDone& m);
  ReplicaRole RoleOf(int replica) const;
  // The replicas a new request may start on: with a prefill replica up, the prefill and
  // both replicas; otherwise all of them.
  std::vector<Replica*> EntryReplicas();
  // Whether a request starting on `r` should hand off after its prefill: `r` is a prefill
  // replica and a replica that decodes, of the same tp size, is up.
  bool HandsOff(const Replica& r) const;
  // Gives each held sequence to a decode replica with room and starts its transfer.
  void PlaceHeldSequences();
  // Places one; false when it must wait for room.
  bool Place(const HeldSeq& held);
  void Dispatch(Replica& r);
  void MaybeProbe(Replica& r);
  void FailReplicaNow(Replica& r, const absl::Status& reason);
  void ApplyEvents(Replica& r, const std::vector<sched::SeqEvent>& events,
                   const v1::StepResponse* response);
  // Queues a not-final event of a live request; when its consumer is too far behind, ends
  // the request (RESOURCE_EXHAUSTED) instead and returns false.
  bool Deliver(Replica& r, uint64_t seq_id, RequestEvent event);
  void Finish(uint64_t seq_id, sched::FinishReason reason, absl::Status error);
  void PublishSnapshot();
  // Ends every request whose deadline has passed; runs before each Schedule().
  void ExpireDeadlines();
  void StartWarmup(Replica& r);

  const Tokenizer* tokenizer_;
  const EngineOptions options_;
  std::atomic<uint64_t> next_seq_id_{1};
  std::atomic<int> num_ready_{0};
  std::atomic<bool> draining_{false};
  std::atomic<int> active_requests_{0};

  absl::Mutex inbox_mu_;
  std::deque<Message> inbox_ ABSL_GUARDED_BY(inbox_mu_);
  bool stop_ ABSL_GUARDED_BY(inbox_mu_) = false;

  // Owned by the loop thread.
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::unordered_map<uint64_t, Live> live_;
  std::multimap<std::chrono::steady_clock::time_point, uint64_t> deadlines_;  // -> seq id.
  std::deque<HeldSeq> held_;                // Prefilled, waiting for a decode replica.
  std::vector<std::future<void>> transfers_;  // KV transfers in flight (or just ended).
  uint64_t next_epoch_ = 1;
  std::chrono::milliseconds heartbeat_{1000};

  mutable absl::Mutex snapshot_mu_;
  std::vector<ReplicaSnapshot> snapshot_ ABSL_GUARDED_BY(snapshot_mu_);

  std::thread loop_;
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_ENGINE_ENGINE_H_
