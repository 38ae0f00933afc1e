#include "kernels/cuda/decode_plan.h"

#include <algorithm>

namespace tessera::kernels::gpu {

int DecodeHeadsPerBlock(int num_q_heads, int num_kv_heads) {
  const int group = num_kv_heads > 0 ? num_q_heads / num_kv_heads : 1;
  for (int g : {8, 4, 2}) {
    if (group % g == 0) return g;
  }
  return 1;
}

DecodeSplitPlan PlanDecodeSplit(const DecodeSplitInputs& in) {
  DecodeSplitPlan plan;
  const int heads_per_block = std::max(in.heads_per_block, 1);
  plan.rows = std::max<int64_t>(0, static_cast<int64_t>(in.num_tokens)) *
              std::max(in.num_q_heads, 0) / heads_per_block;
  const int64_t sms = in.sm_count > 0 ? in.sm_count : kDecodeDefaultSmCount;
  const int64_t target_blocks = sms * kDecodeBlocksPerSm * kDecodeWaves;
  int64_t parts = plan.rows > 0 ? (target_blocks + plan.rows - 1) / plan.rows : 1;
  // Rounded down: every partition keeps at least the minimum at the table's full width.
  const int64_t most = std::max<int64_t>(1, in.max_keys / kDecodeMinPartitionKeys);
  parts = std::clamp<int64_t>(parts, 1, std::min<int64_t>(most, kDecodeMaxPartitions));
  plan.num_partitions = static_cast<int>(parts);
  plan.blocks = plan.rows * parts;
  return plan;
}

size_t DecodeSplitWorkspaceBytes(int num_tokens, int num_q_heads, int head_dim,
                                 int num_partitions) {
  if (num_partitions <= 1 || num_tokens <= 0 || num_q_heads <= 0) return 0;
  const int64_t rows = static_cast<int64_t>(num_tokens) * num_q_heads * num_partitions;
  return static_cast<size_t>(rows) * (2 + std::max(head_dim, 0)) * sizeof(float);
}

}  // namespace tessera::kernels::gpu
