// AVX2 (+FMA, F16C) row kernels for int8 / FP8 E4M3 weights. Only this file's own functions are
// compiled for AVX2 (target pragma, as in gemm_avx2.cc).
#include <cstdint>

#include "common/dtype.h"
#include "kernels/cpu/gemm_quantized_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
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

namespace tessera::kernels::gemm_quantized_avx2 {

struct V {
  using Reg = __m256;
  static constexpr int kWidth = 8;
  static inline Reg Zero() { return _mm256_setzero_ps(); }
  static inline Reg LoadX(const float* p) { return _mm256_loadu_ps(p); }
  static inline Reg Add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  static inline Reg Fma(Reg a, Reg b, Reg acc) { return _mm256_fmadd_ps(a, b, acc); }
  static inline float Sum(Reg r) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(r), _mm256_extractf128_ps(r, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static inline Reg LoadI8(const uint8_t* q) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
  }
  static inline Reg LoadF8(const uint8_t* q) {
    // The same FP16 reinterpretation as the AVX-512 kernel (see there), eight at a time.
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q));
    __m128i t = _mm_slli_epi16(_mm_cvtepu8_epi16(b), 7);
    t = _mm_add_epi16(t, _mm_and_si128(t, _mm_set1_epi16(0x4000)));
    return _mm256_cvtph_ps(t);
  }
};

#include "kernels/cpu/gemm_quantized_rows.inc"

}  // namespace tessera::kernels::gemm_quantized_avx2

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace tessera::kernels::gemm_quantized_internal {
void RowsAvx2(const float* x, int64_t m, const MatrixView& w, const float* values, float* y,
                int64_t row_begin, int64_t row_end) {
  gemm_quantized_avx2::Rows(x, m, w, values, y, row_begin, row_end);
}
}  // namespace tessera::kernels::gemm_quantized_internal

#else  // Not x86-64: the dispatcher never selects this level.

#include <cstdlib>

namespace tessera::kernels::gemm_quantized_internal {
void RowsAvx2(const float*, int64_t, const MatrixView&, const float*, float*, int64_t,
                int64_t) {
  std::abort();
}
}  // namespace tessera::kernels::gemm_quantized_internal

#endif
