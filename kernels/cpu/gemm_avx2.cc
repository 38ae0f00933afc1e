// AVX2 + FMA + F16C GEMM micro-kernels. Only this file's own functions are compiled for AVX2
// (target pragma, not a per-file -mavx2): inline library functions instantiated with
// the wider instruction set could otherwise be picked by the linker for callers on CPUs
// without it.
#include <cstdint>

#include "common/dtype.h"
#include "kernels/cpu/gemm_microkernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// GCC 12's AVX-512 headers build vectors from _mm512_undefined_*(), which -Wuninitialized
// reports once inlined; the pragma has to precede the header to cover those lines.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

namespace tessera::kernels::gemm_avx2 {

struct V {
  using Reg = __m256;
  static constexpr int kWidth = 8;
  // 2 x 4 accumulators + 2 rows of x + weights stay within the 16 ymm registers.
  static constexpr int kMr = 2;
  static constexpr int kNr = 4;

  static inline Reg Zero() { return _mm256_setzero_ps(); }
  static inline Reg LoadX(const float* p) { return _mm256_loadu_ps(p); }
  template <DType D>
  static inline Reg LoadW(const void* w, int64_t index) {
    if constexpr (D == DType::kF32) {
      return _mm256_loadu_ps(static_cast<const float*>(w) + index);
    } else {
      const __m128i h = _mm_loadu_si128(
          reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + index));
      if constexpr (D == DType::kBF16) {
        // bf16 is the top half of an f32: widen and shift into place.
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
      } else {
        return _mm256_cvtph_ps(h);
      }
    }
  }
  static inline Reg Fma(Reg a, Reg b, Reg acc) { return _mm256_fmadd_ps(a, b, acc); }
  static inline float Sum(Reg r) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(r), _mm256_extractf128_ps(r, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

#include "kernels/cpu/gemm_microkernel.inc"

}  // namespace tessera::kernels::gemm_avx2

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace tessera::kernels::gemm_internal {
const KernelSet& Avx2Kernels() {
  static const KernelSet set = gemm_avx2::MakeKernelSet();
  return set;
}
}  // namespace tessera::kernels::gemm_internal

#else  // Not x86-64: the dispatcher never selects this level.

namespace tessera::kernels::gemm_internal {
const KernelSet& Avx2Kernels() { return ScalarKernels(); }
}  // namespace tessera::kernels::gemm_internal

#endif
