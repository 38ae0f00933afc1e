#include "kernels/cpu/simd.h"

#include <atomic>

namespace tessera::kernels {
namespace {

// -1: no override.
std::atomic<int> g_override{-1};

SimdLevel Detect() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return SimdLevel::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    // F16C has no __builtin_cpu_supports name in older compilers; every CPU with AVX2 and
    // FMA (Haswell, Zen and later) has it.
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
