#ifndef TESSERA_WORKER_STEP_BATCH_H_
#define TESSERA_WORKER_STEP_BATCH_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace tessera {

// One step's tokens, flattened over its sequences (host memory). Sequence s computes
// tokens [query_start[s], query_start[s+1]); after the step its cache holds
// context_lens[s] tokens. See kernels::AttentionBatch.
struct StepBatch {
  std::vector<int32_t> token_ids;       // [num_tokens]
  std::vector<int32_t> positions;       // [num_tokens]
  std::vector<int64_t> slot_mapping;    // [num_tokens]
  std::vector<int32_t> query_start;     // [num_seqs + 1]
  std::vector<int32_t> context_lens;    // [num_seqs]
  std::vector<int32_t> block_tables;    // [num_seqs * max_blocks_per_seq], padded with 0
  int max_blocks_per_seq = 0;
  std::vector<int32_t> logits_rows;     // Token rows whose next-token logits are wanted.

  int num_tokens() const { return static_cast<int>(token_ids.size()); }
  int num_seqs() const { return static_cast<int>(context_lens.size()); }

  // Appends tokens [begin, end) of a sequence whose KV lives in `blocks` (its table is
  // padded to max_blocks_per_seq, which must be set first). With `wants_logits` the
  // logits of its last token are returned.
  void AddSequence(absl::Span<const int32_t> tokens, absl::Span<const int32_t> blocks, int begin,
                   int end, int block_size, bool wants_logits);
  // Appends a padding sequence of `tokens` tokens (token 0 at positions 0, 1, ...): its K/V
  // is written nowhere (slot -1, which every backend skips) and it attends over the null
  // block 0, which no sequence owns. Graph shapes and warm-up steps are filled with them.
  void AddPaddingSequence(int tokens);
};

}  // namespace tessera

#endif  // TESSERA_WORKER_STEP_BATCH_H_
