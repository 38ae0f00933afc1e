#ifndef TESSERA_COORDINATOR_SCHEDULER_SCHEDULER_H_
#define TESSERA_COORDINATOR_SCHEDULER_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "coordinator/scheduler/block_hash.h"
#include "coordinator/scheduler/kv_cache_manager.h"
#include "coordinator/scheduler/sequence.h"
#include "coordinator/scheduler/step_plan.h"

namespace tessera::sched {

struct SchedulerConfig {
  int num_blocks = 0;  // Including the reserved block 0; see ReplicaNumBlocks().
  int block_size = 16;
  int max_num_batched_tokens = 2048;  // Token budget of one step.
  int max_num_seqs = 256;             // Running sequences at most.
  int long_prefill_token_threshold = 0;  // Largest prefill chunk; 0: the remaining budget.
  int max_model_len = 0;                 // Context limit; 0: only the pool limits it.
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  bool enable_prefix_caching = true;
  std::vector<int32_t> eos_token_ids;
  BlockHashFn block_hash_fn = nullptr;  // Null: DefaultBlockHash.
  // Admission bounds (0: none): AddRequest answers RESOURCE_EXHAUSTED at once, rather
  // than queueing without end, when the waiting queue already holds this many sequences
  // or the tokens it still has to prefill would pass this many.
  int max_num_waiting = 0;
  int64_t max_num_waiting_tokens = 0;
  // Priority policy: how many later arrivals one priority level is worth (0: strict
  // priority, which lets a steady stream of higher priorities starve the lower ones).
  // Sequences rank by priority * this + arrival, a fixed key, so a sequence is passed
  // by at most priority_aging_arrivals * (its priority - theirs) later arrivals.
  int priority_aging_arrivals = 0;
  // Speculative decoding: a decoding sequence gets up to this many extra slots per step,
  // counted in the token budget and the blocks it needs, for tokens the workers propose
  // (prompt lookup or a draft model) and verify in the same forward pass. 0: off.
  int num_speculative_tokens = 0;
  // Blocks of the workers' host-memory KV tier (0: none; needs prefix caching): cached
  // blocks evicted from the device pool are saved there and loaded back on a prefix hit.
  int num_host_blocks = 0;
};

struct SchedulerStats {
  int num_running = 0;
  int num_waiting = 0;
  int num_free_blocks = 0;
  int num_usable_blocks = 0;
  double kv_cache_usage = 0.0;
  int64_t prefix_cache_queried_tokens = 0;
  int64_t prefix_cache_hit_tokens = 0;
  int64_t num_preemptions = 0;
  int64_t num_lookahead_slots = 0;  // Speculative slots reserved in all steps so far.
  // The host tier: prompt tokens loaded from it (counted in prefix_cache_hit_tokens too),
  // blocks saved to and loaded from it, and its slots in use and in all.
  int64_t host_tier_hit_tokens = 0;
  int64_t host_tier_saved_blocks = 0;
  int64_t host_tier_loaded_blocks = 0;
  int num_host_blocks_used = 0;
  int num_host_blocks = 0;
  // Disaggregated serving: sequences held for a KV transfer out (prefill side) and
  // waiting for one to land (decode side).
  int num_held = 0;
  int num_transferring = 0;
};

// The scheduler of one replica. Each step: Schedule() builds a plan, the workers run it,
// Update() (or FailStep()) applies the result; exactly one step is in flight at a time.
// Not thread-safe: one owner thread drives it.
class Scheduler {
 public:
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(SchedulerConfig config);

  // Queues a request. Rejects duplicates, empty prompts, bad limits and requests that
  // could not fit in the whole KV cache even alone.
  absl::Status AddRequest(Request request);

  // Plans the next step: running sequences first, then waiting ones, under the budgets.
  StepPlan Schedule();
  // Applies the result of the step in flight: appends sampled tokens, checks stop
  // conditions, frees finished sequences. Rejects a result that does not match the plan,
  // changing nothing.
  absl::StatusOr<std::vector<SeqEvent>> Update(const StepResult& result);
  // The step in flight failed on a worker: its sequences finish with kError.
  std::vector<SeqEvent> FailStep();

  // Ends a sequence now (stop strings found by the API layer, cancellation), freeing its
  // blocks. NotFound for an unknown or finished sequence.
  absl::Status Finish(SeqId seq_id, FinishReason reason);
  absl::Status Abort(SeqId seq_id) { return Finish(seq_id, FinishReason::kCancelled); }

  // Disaggregated prefill and decode (docs/scheduler.md, "Handoffs").
  // Prefill side: a held sequence (RequestOptions::prefill_only, after its handed_off event)
  // gives its blocks back once its KV has been sent, or failed to be...
  absl::Status ReleaseHeld(SeqId seq_id);
  // ...or decodes here after all (no decode replica could take it): its KV is still in
  // its blocks, so nothing is recomputed.
  absl::Status ResumeHeld(SeqId seq_id);
  // Decode side: takes a sequence whose prompt was computed elsewhere and whose first
  // `output` tokens were sampled there. Allocates blocks for the prompt's KV now (this
  // replica's own prefix hits included) and returns where the transfer must write;
  // RESOURCE_EXHAUSTED when seats or blocks are short. The sequence runs only after
  // HandoffDone.
  absl::StatusOr<Handoff> AddHandoff(Request request, absl::Span<const int32_t> output);
  // The transfer into a handoff's blocks ended: with `ok` its prompt counts as computed
  // and it decodes; otherwise it is queued to recompute everything here (as after a
  // preemption), so the request still completes.
  absl::Status HandoffDone(SeqId seq_id, bool ok);

  // Sequences to run, or finished ids the workers have not been told about yet.
  bool HasWork() const;
  bool step_in_flight() const { return step_in_flight_; }
  SchedulerStats stats() const;

  // Prefix blocks this replica's device pool already caches for `tokens`, and the blocks
  // the prompts in its waiting queue still need. (The router reads both tiers' hits from
  // kv_cache_manager().GetComputedBlocks.)
  int NumCachedPrefixBlocks(absl::Span<const int32_t> tokens) const;
  int num_queued_prompt_blocks() const { return num_queued_prompt_blocks_; }
  int64_t num_queued_tokens() const { return num_queued_tokens_; }

  const Sequence* GetSequence(SeqId seq_id) const;
  const KVCacheManager& kv_cache_manager() const { return kv_; }
  const SchedulerConfig& config() const { return config_; }

 private:
  struct Scheduled {
    Sequence* seq;
    int num_tokens;
    bool is_new;  // Not held by the workers: goes out as NewSeqData.
    int lookahead = 0;
    bool loads_from_host = false;  // Its prefix hits include host-tier blocks.
  };
  struct InFlight {
    SeqId seq_id;
    int num_tokens;
    bool samples_token;
    int lookahead = 0;
    bool loads_from_host = false;
    absl::InlinedVector<int32_t, 1> tokens;  // Filled from the step's result.
  };

  explicit Scheduler(SchedulerConfig config);

  // The checks AddRequest and AddHandoff share: the request itself, not the queue.
  absl::Status Validate(const Request& request) const;
  // The handed_off event of a prefill_only sequence that got its first token.
  SeqEvent Hold(Sequence& seq);

  int ChunkSize(int num_uncomputed_tokens, int budget) const;
  // Speculative slots for a decoding sequence given what is left of the budget.
  int Lookahead(const Sequence& seq, int budget) const;
  void PreemptForWaitingHead(StepPlan& plan);
  bool ScheduleRunning(int& budget, StepPlan& plan);
  void ScheduleWaiting(int& budget);
  void BuildPlan(StepPlan& plan);
  absl::Status MatchSampledTokens(const StepResult& result);

  void Preempt(Sequence* seq, StepPlan& plan);
  void PushWaiting(Sequence* seq, bool front);
  void InsertRunning(Sequence* seq);
  // Frees the blocks and marks the sequence finished; the caller unlinks it from the
  // queues and the map.
  SeqEvent Release(Sequence& seq, FinishReason reason);
  Sequence* FindInFlight(SeqId seq_id);
  void EraseFinished();
  std::optional<FinishReason> CheckStop(const Sequence& seq) const;
  bool RanksBefore(const Sequence& a, const Sequence& b) const;
  int64_t AgedRank(const Sequence& s) const;  // See priority_aging_arrivals.

  const SchedulerConfig config_;
  KVCacheManager kv_;
  absl::flat_hash_map<SeqId, std::unique_ptr<Sequence>> seqs_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // Scheduling order; preemption takes from the back.
  std::vector<Scheduled> scheduled_;
  std::vector<InFlight> in_flight_;
  HostTierCopies in_flight_copies_;  // The host-tier copies of the step in flight.
  std::vector<SeqId> pending_finished_ids_;
  bool step_in_flight_ = false;
  int64_t step_id_ = 0;
  uint64_t next_arrival_ = 0;
  int num_queued_prompt_blocks_ = 0;
  int num_held_ = 0;
  int num_transferring_ = 0;  // Hold seats of max_num_seqs.
  int64_t num_queued_tokens_ = 0;  // Tokens of the waiting sequences.
  SchedulerStats counters_;
};

}  // namespace tessera::sched

#endif  // TESSERA_COORDINATOR_SCHEDULER_SCHEDULER_H_
