#ifndef TESSERA_KERNELS_CPU_HOST_MEMORY_H_
#define TESSERA_KERNELS_CPU_HOST_MEMORY_H_

#include <cstddef>

namespace tessera::kernels {

// Allocations of at least this size are 2 MiB-aligned anonymous mappings that ask the
// kernel for transparent huge pages (madvise MADV_HUGEPAGE, which works in the common
// "madvise" THP mode). Decode streams every weight once a token: with 4 KiB pages a 1B
// model's 2 GB of weights cost half a million TLB misses a token, with 2 MiB pages a
// thousand.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// `alignment`-aligned memory (a power of two, at most 2 MiB), or nullptr when out of
// memory. Large sizes get the huge-page mapping above.
void* AllocateHostMemory(size_t bytes, size_t alignment);

// Frees what AllocateHostMemory returned (nullptr is fine).
void FreeHostMemory(void* ptr);

// Bytes of this process's memory that sit in transparent huge pages (AnonHugePages of
// /proc/self/smaps_rollup), or 0 where unknown.
size_t ProcessHugePageBytes();

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CPU_HOST_MEMORY_H_
