#include "worker/host_kv_tier.h"

#include "absl/strings/str_cat.h"
#include "common/quantization.h"

namespace tessera {

absl::StatusOr<std::unique_ptr<HostKvTier>> HostKvTier::Create(kernels::Backend* backend, const KvCache& cache,
                                                                int num_slots) {
  if (num_slots < 1) return absl::InvalidArgumentError(absl::StrCat("host KV tier of ", num_slots, " slots"));
  auto tier =
      std::unique_ptr<HostKvTier>(new HostKvTier(backend, cache.shape(), cache.num_layers(), num_slots));
  const size_t bytes = tier->bytes_per_slot_ * static_cast<size_t>(num_slots);
  try {
    tier->host_.resize(bytes);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate the host KV tier: ", num_slots, " slots of ", tier->bytes_per_slot_, " bytes"));
  }
  return tier;
}

HostKvTier::HostKvTier(kernels::Backend* backend, const kernels::KvCacheShape& shape, int num_layers,
                       int num_slots)
    : backend_(backend), shape_(shape), num_layers_(num_layers), num_slots_(num_slots) {
  size_t per_layer = 0;
  for (const Extent& e : Extents(0)) per_layer += e.bytes;
  bytes_per_slot_ = 2 * per_layer * static_cast<size_t>(num_layers);  // K and V.
}

std::vector<HostKvTier::Extent> HostKvTier::Extents(int block) const {
  // A layer's cache is [blocks, block_size, heads, head_dim] values, then (FP8) one scale
  // per [block, token, head] row after all the values (kernels::KvCacheShape).
  const size_t rows = static_cast<size_t>(shape_.block_size) * shape_.num_kv_heads;
  const size_t value_bytes = rows * shape_.head_dim * DTypeSize(shape_.dtype);
  std::vector<Extent> extents = {{static_cast<size_t>(block) * value_bytes, value_bytes}};
  const size_t scale_bytes = rows * KvScaleBytes(shape_.dtype);
  if (scale_bytes > 0) extents.push_back({shape_.scales_offset() + static_cast<size_t>(block) * scale_bytes, scale_bytes});
  return extents;
}

absl::Status HostKvTier::Check(const KvCache& cache, int block, int slot) const {
  if (block < 1 || block >= cache.shape().num_blocks || slot < 0 || slot >= num_slots_) {
    return absl::InvalidArgumentError(absl::StrCat("KV copy between block ", block, " (of ", cache.shape().num_blocks,
                                                   ") and host slot ", slot, " (of ", num_slots_, ")"));
  }
  return absl::OkStatus();
}

absl::Status HostKvTier::Save(const KvCache& cache, int block, int slot) {
  if (absl::Status s = Check(cache, block, slot); !s.ok()) return s;
  uint8_t* out = host_.data() + static_cast<size_t>(slot) * bytes_per_slot_;
  const std::vector<Extent> extents = Extents(block);
  for (int l = 0; l < num_layers_; ++l) {
    for (const void* base : {cache.k(l), cache.v(l)}) {
      for (const Extent& e : extents) {
        backend_->CopyToHost(out, static_cast<const uint8_t*>(base) + e.offset, e.bytes);
        out += e.bytes;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status HostKvTier::Load(int slot, KvCache& cache, int block) {
  if (absl::Status s = Check(cache, block, slot); !s.ok()) return s;
  const uint8_t* in = host_.data() + static_cast<size_t>(slot) * bytes_per_slot_;
  const std::vector<Extent> extents = Extents(block);
  for (int l = 0; l < num_layers_; ++l) {
    for (void* base : {cache.k(l), cache.v(l)}) {
      for (const Extent& e : extents) {
        backend_->CopyToDevice(static_cast<uint8_t*>(base) + e.offset, in, e.bytes);
        in += e.bytes;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera
