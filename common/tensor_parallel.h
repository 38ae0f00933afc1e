#ifndef TESSERA_COMMON_TENSOR_PARALLEL_H_
#define TESSERA_COMMON_TENSOR_PARALLEL_H_

#include <vector>

#include "absl/status/statusor.h"
#include "common/checkpoint.h"
#include "common/model_config.h"

namespace tessera {

// Balanced split of [0, n) into `world` parts: the first n % world parts get one more.
Range EvenSplit(int64_t n, int rank, int world);

// Which part of every weight rank `rank` of a `world`-way tensor-parallel group owns.
// Query heads split evenly (they must divide); KV heads split when there are at least
// `world` of them, else each is replicated over world / num_kv_heads ranks. The MLP's
// intermediate dimension and the vocabulary split unevenly when they must.
// Experts of a mixture of experts either split like a dense MLP, each expert's
// intermediate dimension across the ranks (tensor-parallel experts), or, with
// `expert_parallel`, whole experts go to ranks, num_experts / world each (an uneven count
// is refused). Either way each rank's partial MLP output is completed by the same
// all-reduce as a dense MLP's. A shared expert (Qwen2-MoE) always splits like a dense MLP.
struct ShardLayout {
  int rank = 0;
  int world = 1;
  Range q_heads;   // Query heads of this rank.
  Range kv_heads;  // KV heads of this rank (global indices).
  Range intermediate;
  Range vocab;
  bool expert_parallel = false;
  Range experts;              // Experts held by this rank (global ids).
  Range expert_intermediate;  // This rank's slice of each held expert.
  Range shared_intermediate;  // This rank's slice of the shared expert.

  static absl::StatusOr<ShardLayout> Make(const ModelConfig& config, int rank, int world,
                                          bool expert_parallel = false);
};

// The tensor-parallel sizes in [1, max_world] that `config` can be sharded over: what an
// error about an impossible --tp suggests instead.
std::vector<int> ValidTensorParallelSizes(const ModelConfig& config, bool expert_parallel,
                                          int max_world = 64);

// `status` (a refused layout for `world` ranks) with the sizes that would work appended.
absl::Status WithValidTensorParallelSizes(const absl::Status& status, const ModelConfig& config,
                                          bool expert_parallel);

}  // namespace tessera

#endif  // TESSERA_COMMON_TENSOR_PARALLEL_H_
