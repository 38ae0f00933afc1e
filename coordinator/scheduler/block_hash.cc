#include "coordinator/scheduler/block_hash.h"

namespace tessera::sched {
namespace {

// The murmur3 64-bit finalizer: every input bit affects every output bit.
uint64_t Fmix64(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

uint64_t RotateLeft(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

}  // namespace

uint64_t DefaultBlockHash(uint64_t parent_hash, absl::Span<const int32_t> tokens) {
  constexpr uint64_t kPrime1 = 0x9e3779b185ebca87ULL;
  constexpr uint64_t kPrime2 = 0xc2b2ae3d27d4eb4fULL;
  uint64_t h = Fmix64(parent_hash ^ (tokens.size() * kPrime2));
  for (int32_t token : tokens) {
    h = RotateLeft(h + static_cast<uint32_t>(token) * kPrime2, 31) * kPrime1;
  }
  return Fmix64(h);
}

}  // namespace tessera::sched
