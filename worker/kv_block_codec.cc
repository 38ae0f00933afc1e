#include "worker/kv_block_codec.h"

#include "absl/strings/str_cat.h"
#include "common/quantization.h"

namespace tessera {

KvBlockCodec::KvBlockCodec(kernels::Backend* backend, const kernels::KvCacheShape& shape, int num_layers)
    : backend_(backend), shape_(shape), num_layers_(num_layers) {
  size_t per_layer = 0;
  for (const Extent& e : Extents(0)) per_layer += e.bytes;
  bytes_per_block_ = 2 * per_layer * static_cast<size_t>(num_layers);  // K and V.
}

std::vector<KvBlockCodec::Extent> KvBlockCodec::Extents(int block) const {
  // A layer's cache is [blocks, block_size, heads, head_dim] values, then (FP8) one scale
  // per [block, token, head] row after all the values (kernels::KvCacheShape).
  const size_t rows = static_cast<size_t>(shape_.block_size) * shape_.num_kv_heads;
  const size_t value_bytes = rows * shape_.head_dim * DTypeSize(shape_.dtype);
  std::vector<Extent> extents = {{static_cast<size_t>(block) * value_bytes, value_bytes}};
  const size_t scale_bytes = rows * KvScaleBytes(shape_.dtype);
  if (scale_bytes > 0) extents.push_back({shape_.scales_offset() + static_cast<size_t>(block) * scale_bytes, scale_bytes});
  return extents;
}

absl::Status KvBlockCodec::CheckBlock(const KvCache& cache, int block) {
  if (block < 1 || block >= cache.shape().num_blocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV block ", block, " is outside the cache's usable blocks 1..", cache.shape().num_blocks - 1));
  }
  return absl::OkStatus();
}

void KvBlockCodec::Read(const KvCache& cache, int block, uint8_t* out) const {
  const std::vector<Extent> extents = Extents(block);
  for (int l = 0; l < num_layers_; ++l) {
    for (const void* base : {cache.k(l), cache.v(l)}) {
      for (const Extent& e : extents) {
        backend_->CopyToHost(out, static_cast<const uint8_t*>(base) + e.offset, e.bytes);
        out += e.bytes;
      }
    }
  }
}

void KvBlockCodec::Write(const uint8_t* in, KvCache& cache, int block) const {
  const std::vector<Extent> extents = Extents(block);
  for (int l = 0; l < num_layers_; ++l) {
    for (void* base : {cache.k(l), cache.v(l)}) {
      for (const Extent& e : extents) {
        backend_->CopyToDevice(static_cast<uint8_t*>(base) + e.offset, in, e.bytes);
        in += e.bytes;
      }
    }
  }
}

}  // namespace tessera
