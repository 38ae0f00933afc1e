#ifndef TESSERA_KERNELS_CUDA_DECODE_PLAN_H_
#define TESSERA_KERNELS_CUDA_DECODE_PLAN_H_

#include <cstddef>
#include <cstdint>

// How the split-K ("flash-decoding") attention kernel cuts its work: how many KV partitions
// each (token, head group) row gets. Plain host code, no CUDA includes, so it is built and
// unit-tested without nvcc (tests/kernels/decode_plan_test.cc).
//
// The plan must be CUDA-graph stable: the worker captures one graph per padded batch shape
// and replays it with other context lengths, so the partition count (the grid, and the
// workspace size) depends only on the batch shape, the heads, the block-table width and
// the GPU, never on a step's actual context lengths. The kernel then cuts each token's own
// visible keys into that many pieces on the device (paged::EvenPartitionKeys), so a short
// sequence in a wide table still spreads over every partition.
namespace tessera::kernels::gpu {

// A partition never gets fewer keys than this at the table's full width: below it the
// per-partition fixed costs (loading q, merging, the partials' round trip) dominate.
constexpr int kDecodeMinPartitionKeys = 256;
// Per-token partitions are multiples of this many keys (a full 16-slot block).
constexpr int kDecodePartitionGranule = 16;
// Resident split-K blocks per SM the plan assumes (128 threads, roughly 100-180 registers
// a thread and up to 32 KiB of shared memory a block for the merge).
constexpr int kDecodeBlocksPerSm = 4;
// Waves of blocks the plan aims for: two, so the tail of one wave overlaps the next.
constexpr int kDecodeWaves = 2;
// The SM count assumed when the caller does not know it (an H100 / H200 has 132).
constexpr int kDecodeDefaultSmCount = 132;
// The grid's z dimension limit.
constexpr int kDecodeMaxPartitions = 65535;

struct DecodeSplitInputs {
  int num_tokens = 0;       // Query tokens of the batch (padded batch size for decode).
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int heads_per_block = 1;  // Query heads sharing one K/V read (DecodeHeadsPerBlock).
  int max_keys = 0;         // Keys the widest sequence may hold: max_blocks_per_seq * block_size.
  int sm_count = 0;         // The device's SMs; <= 0: kDecodeDefaultSmCount.
};

struct DecodeSplitPlan {
  int num_partitions = 1;  // P: KV partitions per (token, head group) row.
  int64_t rows = 0;        // (token, head group) rows: num_tokens * num_q_heads / heads_per_block.
  int64_t blocks = 0;      // rows * num_partitions: the split kernel's grid.
};

// Query heads one split-K block serves: the largest of 8, 4, 2, 1 dividing the GQA group
// (num_q_heads / num_kv_heads), so a block never spans two KV heads.
int DecodeHeadsPerBlock(int num_q_heads, int num_kv_heads);

// P such that rows * P fills about kDecodeWaves waves of kDecodeBlocksPerSm blocks on each
// SM, but never more partitions than leave kDecodeMinPartitionKeys keys each at max_keys
// (so P = 1 when the batch alone fills the GPU or the table is narrow).
DecodeSplitPlan PlanDecodeSplit(const DecodeSplitInputs& in);

// Device bytes of the partials for `num_partitions` partitions: per (token, query head,
// partition) a running max, a sum and head_dim accumulators, all float32. 0 when
// num_partitions <= 1 (the split kernel then writes the output directly).
size_t DecodeSplitWorkspaceBytes(int num_tokens, int num_q_heads, int head_dim,
                                 int num_partitions);

}  // namespace tessera::kernels::gpu

#endif  // TESSERA_KERNELS_CUDA_DECODE_PLAN_H_
