#include "kernels/cpu/host_memory.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

namespace tessera::kernels {
namespace {

size_t RoundUp(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// The mappings handed out, with their lengths (munmap needs them).
struct Mappings {
  std::mutex mu;
  std::unordered_map<void*, size_t> lengths;
};

Mappings& TheMappings() {
  static auto* mappings = new Mappings();  // Never destroyed: frees may come at exit.
  return *mappings;
}

void* MapHugePageAligned(size_t bytes) {
  const size_t length = RoundUp(bytes, kHugePageBytes);
  if (length < bytes) return nullptr;  // Overflow.
  // Over-map by one huge page, then trim both ends to a 2 MiB-aligned range.
  void* raw = mmap(nullptr, length + kHugePageBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = RoundUp(start, kHugePageBytes);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t tail = start + length + kHugePageBytes - (aligned + length);
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + length), tail);
  void* ptr = reinterpret_cast<void*>(aligned);
  // Advice only: without THP the memory still works, in 4 KiB pages.
  madvise(ptr, length, MADV_HUGEPAGE);
  Mappings& m = TheMappings();
  std::lock_guard<std::mutex> lock(m.mu);
  m.lengths.emplace(ptr, length);
  return ptr;
}

}  // namespace

void* AllocateHostMemory(size_t bytes, size_t alignment) {
  if (bytes >= kHugePageBytes) return MapHugePageAligned(bytes);
  // aligned_alloc wants a multiple of the alignment; a zero-byte request still gets a
  // distinct pointer so nullptr keeps meaning "out of memory".
  const size_t rounded = RoundUp(bytes == 0 ? 1 : bytes, alignment);
  if (rounded < bytes) return nullptr;  // Overflow.
  return std::aligned_alloc(alignment, rounded);
}

void FreeHostMemory(void* ptr) {
  if (ptr == nullptr) return;
  Mappings& m = TheMappings();
  {
    std::lock_guard<std::mutex> lock(m.mu);
    auto it = m.lengths.find(ptr);
    if (it != m.lengths.end()) {
      munmap(ptr, it->second);
      m.lengths.erase(it);
      return;
    }
  }
  std::free(ptr);
}

size_t ProcessHugePageBytes() {
  FILE* f = std::fopen("/proc/self/smaps_rollup", "r");
  if (f == nullptr) return 0;
  char line[256];
  unsigned long long kib = 0;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::sscanf(line, "AnonHugePages: %llu kB", &kib) == 1) break;
  }
  std::fclose(f);
  return static_cast<size_t>(kib) * 1024;
}

}  // namespace tessera::kernels
