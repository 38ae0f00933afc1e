#ifndef TESSERA_KERNELS_CPU_SIMD_H_
#define TESSERA_KERNELS_CPU_SIMD_H_

namespace tessera::kernels {

// Instruction sets the CPU kernels have code paths for, widest last. The kernels pick the
// widest one the CPU supports at first use; the portable scalar path is the fallback and
// the baseline the SIMD paths are tested against.
enum class SimdLevel { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

const char* SimdLevelName(SimdLevel level);

// The widest level this CPU supports (AVX2 needs FMA and F16C too).
SimdLevel DetectSimdLevel();

// The level the kernels use now: DetectSimdLevel() unless overridden.
SimdLevel ActiveSimdLevel();

// Makes the kernels use `level`, clamped to what the CPU supports, and returns the level
// that took effect. For tests and benchmarks that compare code paths; not meant to be
// changed while kernels run on other threads.
SimdLevel SetSimdLevelOverride(SimdLevel level);

// Restores automatic selection.
void ClearSimdLevelOverride();

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CPU_SIMD_H_
