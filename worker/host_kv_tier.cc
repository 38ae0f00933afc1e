#include "worker/host_kv_tier.h"

#include "absl/strings/str_cat.h"

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
    : codec_(backend, shape, num_layers), num_slots_(num_slots), bytes_per_slot_(codec_.bytes_per_block()) {}

absl::Status HostKvTier::Check(const KvCache& cache, int block, int slot) const {
  if (slot < 0 || slot >= num_slots_) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV copy between block ", block, " and host slot ", slot, " (of ", num_slots_, ")"));
  }
  return KvBlockCodec::CheckBlock(cache, block);
}

absl::Status HostKvTier::Save(const KvCache& cache, int block, int slot) {
  if (absl::Status s = Check(cache, block, slot); !s.ok()) return s;
  codec_.Read(cache, block, host_.data() + static_cast<size_t>(slot) * bytes_per_slot_);
  return absl::OkStatus();
}

absl::Status HostKvTier::Load(int slot, KvCache& cache, int block) {
  if (absl::Status s = Check(cache, block, slot); !s.ok()) return s;
  codec_.Write(host_.data() + static_cast<size_t>(slot) * bytes_per_slot_, cache, block);
  return absl::OkStatus();
}

}  // namespace tessera
