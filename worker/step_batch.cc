#include "worker/step_batch.h"

namespace tessera {

void StepBatch::AddSequence(absl::Span<const int32_t> tokens, absl::Span<const int32_t> blocks,
                            int begin, int end, int block_size, bool wants_logits) {
  if (query_start.empty()) query_start.push_back(0);
  for (int pos = begin; pos < end; ++pos) {
    token_ids.push_back(tokens[pos]);
    positions.push_back(pos);
    slot_mapping.push_back(static_cast<int64_t>(blocks[pos / block_size]) * block_size +
                           pos % block_size);
  }
  query_start.push_back(num_tokens());
  context_lens.push_back(end);
  for (int b = 0; b < max_blocks_per_seq; ++b) {
    block_tables.push_back(b < static_cast<int>(blocks.size()) ? blocks[b] : 0);
  }
  if (wants_logits) logits_rows.push_back(num_tokens() - 1);
}

void StepBatch::AddPaddingSequence(int tokens) {
  if (query_start.empty()) query_start.push_back(0);
  for (int pos = 0; pos < tokens; ++pos) {
    token_ids.push_back(0);
    positions.push_back(pos);
    slot_mapping.push_back(-1);
  }
  query_start.push_back(num_tokens());
  context_lens.push_back(tokens);
  block_tables.insert(block_tables.end(), max_blocks_per_seq, 0);
}

}  // namespace tessera
