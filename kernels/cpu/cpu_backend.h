#ifndef TESSERA_KERNELS_CPU_CPU_BACKEND_H_
#define TESSERA_KERNELS_CPU_CPU_BACKEND_H_

#include <cstddef>

// MakeCpuBackend() is declared in kernels/backend.h; this header holds what the CPU
// backend exposes beyond the interface.
namespace tessera::kernels {

// Alignment of every CPU backend allocation (one cache line, one AVX-512 vector).
inline constexpr size_t kCpuAllocAlignment = 64;

// MemAvailable from /proc/meminfo in bytes, or the free physical pages where that file is
// unreadable.
size_t AvailableHostMemoryBytes();
// The host's physical memory in bytes (0 where sysconf cannot tell).
size_t PhysicalHostMemoryBytes();

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CPU_CPU_BACKEND_H_
