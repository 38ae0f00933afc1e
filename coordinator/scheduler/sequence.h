#ifndef TESSERA_COORDINATOR_SCHEDULER_SEQUENCE_H_
#define TESSERA_COORDINATOR_SCHEDULER_SEQUENCE_H_

#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "coordinator/scheduler/block.h"

namespace tessera::sched {

enum class FinishReason { kLength, kStop, kEos, kCancelled, kError };

// "length", "stop", "eos", "cancelled", "error".
absl::string_view FinishReasonName(FinishReason reason);

enum class SchedulingPolicy {
  kFcfs,      // Arrival order; preemption takes the latest admitted.
  kPriority,  // Lower `priority` first, ties by arrival; may preempt lower priorities.
};

// What the scheduler needs of a request; sampling itself is the workers' business.
struct RequestOptions {
  int max_new_tokens = 16;
  int min_new_tokens = 0;  // EOS and stop tokens are ignored before this many.
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;
  int priority = 0;              // Only used by SchedulingPolicy::kPriority.
  uint64_t sampling_handle = 0;  // Opaque; handed to workers with the sequence.
  // Disaggregated serving, on a prefill replica: after its first token the sequence leaves
  // the step loop without finishing and keeps its blocks for the KV transfer to a decode
  // replica (Scheduler::ReleaseHeld, or ResumeHeld to decode here after all).
  bool prefill_only = false;
};

struct Request {
  SeqId seq_id = 0;
  std::vector<int32_t> prompt_token_ids;
  RequestOptions options;
};

enum class SequenceStatus {
  kWaiting,
  kRunning,
  kHeld,          // Prefill side of a handoff: done here, blocks kept for the transfer.
  kTransferring,  // Decode side of a handoff: blocks allocated, the KV still arriving.
  kFinished,
};

struct Sequence {
  SeqId id = 0;
  RequestOptions options;
  // The prompt followed by every generated token. After a preemption all of it is
  // recomputed, so generated tokens survive it.
  std::vector<int32_t> token_ids;
  int num_prompt_tokens = 0;
  int num_computed_tokens = 0;  // Tokens whose KV exists (or is computed this step).
  int num_cached_tokens = -1;   // Prefix-cache hit at first admission; -1 before.
  uint64_t arrival = 0;         // Admission order to the scheduler, for FCFS and ties.
  SequenceStatus status = SequenceStatus::kWaiting;
  int64_t preempted_at_step = -1;
  // What the workers already hold: they keep per-sequence state between steps and are
  // sent only what is new.
  bool known_to_workers = false;
  int num_blocks_sent = 0;
  int num_tokens_sent = 0;
  // Ended (cancelled) while its KV was arriving: the blocks go back once the transfer ends,
  // since the sender may still be writing them.
  bool finish_after_transfer = false;

  int num_tokens() const { return static_cast<int>(token_ids.size()); }
  int num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  int num_uncomputed_tokens() const { return num_tokens() - num_computed_tokens; }
};

}  // namespace tessera::sched

#endif  // TESSERA_COORDINATOR_SCHEDULER_SEQUENCE_H_
