#ifndef TESSERA_WORKER_KV_CACHE_H_
#define TESSERA_WORKER_KV_CACHE_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "worker/device_buffer.h"

namespace tessera {

// This rank's slice of the paged KV cache: for every layer, K and V laid out
// [num_blocks, block_size, kv_heads_local, head_dim] in shape.dtype (see
// kernels::KvCacheShape). Block metadata lives in the coordinator; the worker only stores
// data at the slots it is told.
class KvCache {
 public:
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(kernels::Backend* backend,
                                                         int num_layers,
                                                         const kernels::KvCacheShape& shape);

  // Bytes one block costs across all layers (K and V, FP8 scales included).
  static size_t BytesPerBlock(int num_layers, int block_size, int kv_heads, int head_dim,
                              DType dtype);

  void* k(int layer) const { return k_[layer].get(); }
  void* v(int layer) const { return v_[layer].get(); }
  const kernels::KvCacheShape& shape() const { return shape_; }
  int num_layers() const { return static_cast<int>(k_.size()); }
  size_t bytes() const;

 private:
  kernels::KvCacheShape shape_;
  std::vector<DeviceBuffer> k_;
  std::vector<DeviceBuffer> v_;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_KV_CACHE_H_
