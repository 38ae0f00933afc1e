#ifndef TESSERA_WORKER_KV_BLOCK_CODEC_H_
#define TESSERA_WORKER_KV_BLOCK_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/backend.h"
#include "worker/kv_cache.h"

namespace tessera {

// One block of this rank's KV cache as contiguous bytes: every layer in order, K then V,
// each its values then (FP8) its scales. The host tier stores blocks this way and KV
// transfers between replicas send them this way, so a block written by one rank reads back
// on any rank with the same cache shape. Copies go through the backend (CPU or CUDA).
class KvBlockCodec {
 public:
  KvBlockCodec(kernels::Backend* backend, const kernels::KvCacheShape& shape, int num_layers);

  size_t bytes_per_block() const { return bytes_per_block_; }
  // INVALID_ARGUMENT unless `block` is a usable block of `cache` (block 0 is reserved).
  static absl::Status CheckBlock(const KvCache& cache, int block);
  // `out` / `in` hold bytes_per_block() bytes.
  void Read(const KvCache& cache, int block, uint8_t* out) const;
  void Write(const uint8_t* in, KvCache& cache, int block) const;

 private:
  // Where one layer's K or V of one block lies: its values, then (FP8) its scales.
  struct Extent {
    size_t offset;
    size_t bytes;
  };
  std::vector<Extent> Extents(int block) const;

  kernels::Backend* backend_;
  const kernels::KvCacheShape shape_;
  const int num_layers_;
  size_t bytes_per_block_ = 0;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_KV_BLOCK_CODEC_H_
