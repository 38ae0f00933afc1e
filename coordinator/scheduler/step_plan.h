#ifndef TESSERA_COORDINATOR_SCHEDULER_STEP_PLAN_H_
#define TESSERA_COORDINATOR_SCHEDULER_STEP_PLAN_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "coordinator/scheduler/block.h"
#include "coordinator/scheduler/sequence.h"

namespace tessera::sched {

// The step contract with the workers (see docs/scheduler.md). Diffs, not state: a
// sequence's tokens and block table go once, in NewSeqData; afterwards only what changed.
// Every scheduled sequence appears exactly once, in new_seqs or cached_seqs.

// A sequence the workers do not hold: first scheduled, or scheduled again after a
// preemption (then token_ids include the tokens generated before it).
struct NewSeqData {
  SeqId seq_id = 0;
  std::vector<int32_t> token_ids;
  std::vector<BlockId> block_ids;
  int num_computed_tokens = 0;  // Prefix-cache hits: KV already present in block_ids.
  int num_scheduled_tokens = 0;
  bool samples_token = false;   // The chunk reaches the last known token.
  uint64_t sampling_handle = 0;
  // Slots reserved past the scheduled tokens for speculative tokens the workers propose
  // and verify in this step (decode steps only; see SchedulerConfig).
  int num_lookahead_tokens = 0;
};

// A sequence the workers hold from an earlier step.
struct CachedSeqData {
  SeqId seq_id = 0;
  absl::InlinedVector<int32_t, 1> new_token_ids;  // Sampled since last sent (decode: 1).
  absl::InlinedVector<BlockId, 1> new_block_ids;  // Appended to its block table.
  int num_computed_tokens = 0;
  int num_scheduled_tokens = 0;
  bool samples_token = false;
  int num_lookahead_tokens = 0;  // As in NewSeqData.
};

// One block's KV between the device pool and a host-tier slot.
struct KvCopy {
  BlockId block_id = kNullBlock;
  int host_slot = 0;
  bool operator==(const KvCopy&) const = default;
};

// What the workers copy at the start of a step: saves before loads.
struct HostTierCopies {
  std::vector<KvCopy> to_host;    // Evicted cached blocks kept in host memory.
  std::vector<KvCopy> from_host;  // Host-tier hits loaded into the blocks given to them.
};

struct StepPlan {
  int64_t step_id = 0;
  std::vector<NewSeqData> new_seqs;
  std::vector<CachedSeqData> cached_seqs;
  int total_num_scheduled_tokens = 0;
  std::vector<SeqId> finished_ids;   // Finished or cancelled: drop their state.
  std::vector<SeqId> preempted_ids;  // Preempted this step: drop; they return as new.
  HostTierCopies host_copies;        // Done by the workers before anything else.

  int num_scheduled_seqs() const {
    return static_cast<int>(new_seqs.size() + cached_seqs.size());
  }
};

struct SampledToken {
  SeqId seq_id = 0;
  int32_t token_id = 0;
};

// What the workers return: for each sequence with samples_token, one token, or with
// lookahead up to 1 + num_lookahead_tokens tokens in order (the accepted speculative
// tokens, then the target's own), as consecutive entries.
struct StepResult {
  int64_t step_id = 0;
  std::vector<SampledToken> sampled;
};

// Per-sequence outcome of a step, for streaming to the client.
struct SeqEvent {
  SeqId seq_id = 0;
  // Tokens the sequence gained this step, in order (more than one with speculation);
  // cut after a token that finished it.
  absl::InlinedVector<int32_t, 1> new_token_ids;
  std::optional<FinishReason> finish_reason;
  int num_output_tokens = 0;
  int num_cached_tokens = 0;  // Prompt tokens served by the prefix cache.
  // A prefill_only sequence got its first token and is held for its KV transfer.
  bool handed_off = false;
};

// Where a handed-off prompt's KV goes on the decode replica: blocks [first_block, ...) of
// the prompt, into `block_ids` (the ones before are the decode replica's own prefix hits).
struct Handoff {
  int first_block = 0;
  std::vector<BlockId> block_ids;
};

}  // namespace tessera::sched

#endif  // TESSERA_COORDINATOR_SCHEDULER_STEP_PLAN_H_
