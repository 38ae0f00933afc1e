// AVX-512F GEMM micro-kernels. Only this file's own functions are compiled for AVX-512
// (target pragma, not a per-file -mavx512f): inline library functions instantiated with
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
#pragma clang attribute push(__attribute__((target("avx512f,avx2,fma,f16c"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma,f16c")
#endif

namespace tessera::kernels::gemm_avx512 {

struct V {
  using Reg = __m512;
  static constexpr int kWidth = 16;
  // 4 x 4 accumulators + 4 rows of x + 1 weight vector fit the 32 zmm registers.
  static constexpr int kMr = 4;
  static constexpr int kNr = 4;

  static inline Reg Zero() { return _mm512_setzero_ps(); }
  static inline Reg LoadX(const float* p) { return _mm512_loadu_ps(p); }
  template <DType D>
  static inline Reg LoadW(const void* w, int64_t index) {
    if constexpr (D == DType::kF32) {
      return _mm512_loadu_ps(static_cast<const float*>(w) + index);
    } else {
      const __m256i h = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + index));
      if constexpr (D == DType::kBF16) {
        // bf16 is the top half of an f32: widen and shift into place.
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
      } else {
        return _mm512_cvtph_ps(h);
      }
    }
  }
  static inline Reg Fma(Reg a, Reg b, Reg acc) { return _mm512_fmadd_ps(a, b, acc); }
  static inline float Sum(Reg r) { return _mm512_reduce_add_ps(r); }
};

#include "kernels/cpu/gemm_microkernel.inc"

}  // namespace tessera::kernels::gemm_avx512

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace tessera::kernels::gemm_internal {
const KernelSet& Avx512Kernels() {
  static const KernelSet set = gemm_avx512::MakeKernelSet();
  return set;
}
}  // namespace tessera::kernels::gemm_internal

#else  // Not x86-64: the dispatcher never selects this level.

namespace tessera::kernels::gemm_internal {
const KernelSet& Avx512Kernels() { return ScalarKernels(); }
}  // namespace tessera::kernels::gemm_internal

#endif
