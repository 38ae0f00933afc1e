#include "kernels/cpu/simd.h"

#include <atomic>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

namespace tessera::kernels {
namespace {

// -1: no override.
std::atomic<int> g_override{-1};

SimdLevel Detect() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    // GCC 12's __builtin_cpu_supports knows no "avx512bf16": CPUID leaf 7 subleaf 1, EAX bit 5.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool bf16 = __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & (1u << 5));
    if (bf16 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) {
      return SimdLevel::kAvx512Bf16;
    }
    return SimdLevel::kAvx512;
  }
  // GCC 12's __builtin_cpu_supports("f16c") reads 0 even where CPUID has it: ask CPUID.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c) {
    return SimdLevel::kAvx2;
  }
#endif
  return SimdLevel::kScalar;
}

}  // namespace

const char* SimdLevelName(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar: return "scalar";
    case SimdLevel::kAvx2: return "avx2";
    case SimdLevel::kAvx512: return "avx512";
    case SimdLevel::kAvx512Bf16: return "avx512bf16";
  }
  return "?";
}

SimdLevel DetectSimdLevel() {
  static const SimdLevel level = Detect();
  return level;
}

SimdLevel ActiveSimdLevel() {
  const int forced = g_override.load(std::memory_order_relaxed);
  return forced < 0 ? DetectSimdLevel() : static_cast<SimdLevel>(forced);
}

SimdLevel SetSimdLevelOverride(SimdLevel level) {
  const SimdLevel detected = DetectSimdLevel();
  const SimdLevel effective =
      static_cast<int>(level) > static_cast<int>(detected) ? detected : level;
  g_override.store(static_cast<int>(effective), std::memory_order_relaxed);
  return effective;
}

void ClearSimdLevelOverride() { g_override.store(-1, std::memory_order_relaxed); }

}  // namespace tessera::kernels
