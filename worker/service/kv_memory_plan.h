#ifndef TESSERA_WORKER_SERVICE_KV_MEMORY_PLAN_H_
#define TESSERA_WORKER_SERVICE_KV_MEMORY_PLAN_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace tessera {

// What a worker knows once its weights are in, and how the coordinator asked it to size
// its KV pool. Bytes of the backend's memory: the device's, or the host's on the CPU.
struct KvMemoryInputs {
  uint64_t device_total_bytes = 0;  // 0: unknown (then gpu_memory_utilization cannot work).
  uint64_t device_free_bytes = 0;   // Free now, with the weights loaded.
  uint64_t weight_bytes = 0;        // Held by this worker (a draft model's included).
  uint64_t bytes_per_block = 0;     // One KV block over every layer (a draft's included).
  // Kept out of the KV pool for what a step allocates besides it (ActivationReserveBytes).
  uint64_t activation_reserve_bytes = 0;

  // The sizing, the first one set wins: a fixed budget; vLLM's --gpu-memory-utilization
  // (the share of the device's total memory for weights, reserve and KV pool together);
  // a share of the memory free after loading (<= 0: half).
  uint64_t kv_memory_bytes = 0;
  double gpu_memory_utilization = 0;
  double kv_memory_fraction = 0;

  // Blocks one sequence of the full context needs; with gpu_memory_utilization a pool
  // without room for it (besides block 0, which the coordinator holds back) is an error.
  // 0: not checked.
  uint64_t blocks_per_sequence = 0;
  uint64_t max_blocks = 0;  // More would never be used; 0: no cap.
};

// The number of KV blocks the worker allocates. With gpu_memory_utilization u:
//   u * total - weights - reserve
// bytes of blocks, refused (naming the numbers, in GiB) when u is outside (0, 1]
// (INVALID_ARGUMENT), when u * total leaves no room for the weights, the reserve and one
// full-context sequence (INVALID_ARGUMENT, with the smallest u that has room), or when
// u * total is more than this worker could ever hold because other processes use the
// rest of the device (RESOURCE_EXHAUSTED, with the largest u there is room for).
absl::StatusOr<uint64_t> PlanKvBlocks(const KvMemoryInputs& in);

// The memory a worker holds back from the KV pool for its steps: the activation buffers
// of the largest step (LlamaModel::WorkspaceBytes) plus, on a device with its own memory,
// a margin for what a backend allocates besides them (see the definition).
uint64_t ActivationReserveBytes(uint64_t workspace_bytes, bool device_memory,
                                uint64_t device_total_bytes);

}  // namespace tessera

#endif  // TESSERA_WORKER_SERVICE_KV_MEMORY_PLAN_H_
