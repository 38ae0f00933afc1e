// AVX-512F (+F16C) row kernels for int8 / FP8 E4M3 weights. Only this file's own functions
// are compiled for AVX-512 (target pragma, as in gemm_avx512.cc).
#include <cstdint>

#include "common/dtype.h"
#include "kernels/cpu/gemm_quantized_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
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

namespace tessera::kernels::gemm_quantized_avx512 {

struct V {
  using Reg = __m512;
  static constexpr int kWidth = 16;
  static inline Reg Zero() { return _mm512_setzero_ps(); }
  static inline Reg LoadX(const float* p) { return _mm512_loadu_ps(p); }
  static inline Reg Add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static inline Reg Fma(Reg a, Reg b, Reg acc) { return _mm512_fmadd_ps(a, b, acc); }
  static inline float Sum(Reg r) { return _mm512_reduce_add_ps(r); }
  // VPMOVSXBD + VCVTDQ2PS.
  static inline Reg LoadI8(const uint8_t* q) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
  }
  // ((b & 0x80) << 8) | ((b & 0x7f) << 7) are the FP16 bits of value / 256, exact for
  // normals and subnormals (E4M3's exponent bias 7 is 8 below FP16's 15): VCVTPH2PS.
  static inline Reg LoadF8(const uint8_t* q) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
    __m256i t = _mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 7);
    t = _mm256_add_epi16(t, _mm256_and_si256(t, _mm256_set1_epi16(0x4000)));
    return _mm512_cvtph_ps(t);
  }
};

#include "kernels/cpu/gemm_quantized_rows.inc"

}  // namespace tessera::kernels::gemm_quantized_avx512

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace tessera::kernels::gemm_quantized_internal {
void RowsAvx512(const float* x, int64_t m, const MatrixView& w, const float* values, float* y,
                int64_t row_begin, int64_t row_end) {
  gemm_quantized_avx512::Rows(x, m, w, values, y, row_begin, row_end);
}
}  // namespace tessera::kernels::gemm_quantized_internal

#else  // Not x86-64: the dispatcher never selects this level.

#include <cstdlib>

namespace tessera::kernels::gemm_quantized_internal {
void RowsAvx512(const float*, int64_t, const MatrixView&, const float*, float*, int64_t,
                int64_t) {
  std::abort();
}
}  // namespace tessera::kernels::gemm_quantized_internal

#endif
