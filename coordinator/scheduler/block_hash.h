#ifndef TESSERA_COORDINATOR_SCHEDULER_BLOCK_HASH_H_
#define TESSERA_COORDINATOR_SCHEDULER_BLOCK_HASH_H_

#include <cstdint>

#include "absl/types/span.h"

namespace tessera::sched {

// Hash of one full block chained with its parent's hash, so equal blocks at different
// prefixes hash differently. A plain function pointer so tests can force collisions.
using BlockHashFn = uint64_t (*)(uint64_t parent_hash, absl::Span<const int32_t> tokens);

// Parent hash of a sequence's first block.
inline constexpr uint64_t kRootBlockHash = 0x9e3779b97f4a7c15ULL;

// 64-bit multiply-xorshift mix of the parent hash and each token (murmur3/xxhash style
// finalizers), strong enough that collisions are rare; lookups still confirm tokens.
uint64_t DefaultBlockHash(uint64_t parent_hash, absl::Span<const int32_t> tokens);

}  // namespace tessera::sched

#endif  // TESSERA_COORDINATOR_SCHEDULER_BLOCK_HASH_H_
