#ifndef TESSERA_WORKER_HOST_KV_TIER_H_
#define TESSERA_WORKER_HOST_KV_TIER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "worker/kv_block_codec.h"
#include "worker/kv_cache.h"

namespace tessera {

// This rank's slice of the host-memory KV tier: `num_slots` blocks in host RAM, each the
// K and V of one device block in every layer (FP8 scales included). The coordinator owns
// which block content sits in which slot; the worker only copies when a step says so
// (StepRequest.kv_to_host / kv_from_host). Copies go through the backend, so the same
// tier serves the CPU and the CUDA backends.
class HostKvTier {
 public:
  static absl::StatusOr<std::unique_ptr<HostKvTier>> Create(kernels::Backend* backend, const KvCache& cache,
                                                            int num_slots);

  // Copies block `block` of `cache` into `slot`, and back.
  absl::Status Save(const KvCache& cache, int block, int slot);
  absl::Status Load(int slot, KvCache& cache, int block);

  int num_slots() const { return num_slots_; }
  size_t bytes() const { return host_.size(); }
  size_t bytes_per_slot() const { return bytes_per_slot_; }

 private:
  HostKvTier(kernels::Backend* backend, const kernels::KvCacheShape& shape, int num_layers, int num_slots);
  absl::Status Check(const KvCache& cache, int block, int slot) const;

  const KvBlockCodec codec_;
  const int num_slots_;
  const size_t bytes_per_slot_;
  std::vector<uint8_t> host_;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_HOST_KV_TIER_H_
