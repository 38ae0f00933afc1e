#include "worker/kv_cache.h"

#include "absl/strings/str_cat.h"
#include "common/quantization.h"
#include "common/status_macros.h"

namespace tessera {

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(kernels::Backend* backend,
                                                         int num_layers,
                                                         const kernels::KvCacheShape& shape) {
  if (shape.num_blocks <= 0 || shape.block_size <= 0 || shape.num_kv_heads <= 0 ||
      shape.head_dim <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid KV cache shape: ", shape.num_blocks, " blocks of ",
                     shape.block_size, " tokens, ", shape.num_kv_heads, " heads of ",
                     shape.head_dim));
  }
  if (shape.dtype != DType::kF32 && shape.dtype != DType::kBF16 &&
      shape.dtype != DType::kF8E4M3) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV cache dtype ", DTypeName(shape.dtype), " is not supported"));
  }
  if (shape.dtype == DType::kF8E4M3 && shape.head_dim % 4 != 0) {
    // The float scales follow the bytes and must stay aligned.
    return absl::InvalidArgumentError(absl::StrCat(
        "an FP8 KV cache needs head_dim divisible by 4, got ", shape.head_dim));
  }
  auto cache = std::unique_ptr<KvCache>(new KvCache());
  cache->shape_ = shape;
  const size_t bytes = shape.bytes();
  for (int l = 0; l < num_layers; ++l) {
    ASSIGN_OR_RETURN(DeviceBuffer k,
                     DeviceBuffer::Allocate(backend, bytes, absl::StrCat("K cache layer ", l)));
    ASSIGN_OR_RETURN(DeviceBuffer v,
                     DeviceBuffer::Allocate(backend, bytes, absl::StrCat("V cache layer ", l)));
    cache->k_.push_back(std::move(k));
    cache->v_.push_back(std::move(v));
  }
  return cache;
}

size_t KvCache::BytesPerBlock(int num_layers, int block_size, int kv_heads, int head_dim,
                              DType dtype) {
  return static_cast<size_t>(block_size) *
         KvCacheBytesPerToken(num_layers, kv_heads, head_dim, dtype);
}

size_t KvCache::bytes() const { return shape_.bytes() * 2 * k_.size(); }

}  // namespace tessera
