#ifndef TESSERA_KERNELS_CPU_SIMD_H_
#define TESSERA_KERNELS_CPU_SIMD_H_

namespace tessera::kernels {

// Instruction sets the CPU kernels have code paths for, widest last. The kernels pick the
// widest one the CPU supports at first use; the portable scalar path is the fallback and
// the baseline the SIMD paths are tested against.
//
// kAvx512Bf16 (AVX-512 with VDPBF16PS) differs from kAvx512 only for BF16 weights: their
// matrix products round the activations to BF16 and multiply pairs with VDPBF16PS, which
// does twice the work of an FP32 FMA per instruction (as llama.cpp and torch's bf16 paths
// do). Every other op runs its AVX-512 code.
enum class SimdLevel { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Bf16 = 3 };

const char* SimdLevelName(SimdLevel level);

// The widest level this CPU supports (AVX2 needs FMA and F16C too; kAvx512Bf16 needs
// AVX512-BF16, -BW and -VL besides AVX512F).
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
