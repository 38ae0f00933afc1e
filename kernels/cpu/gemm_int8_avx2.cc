// AVX2 block kernels for int8 and int4 weights: each 16-row block in two 8-row halves,
// VPMADDWD then VPADDD.
// Only this file's own functions are compiled for these instructions (target pragma, as in
// gemm_avx512.cc).
#include <cstdint>

#include "kernels/cpu/gemm_int8_internal.h"
#include "kernels/cpu/int8_blocked.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

namespace tessera::kernels::gemm_int8_avx2 {

using gemm_int8_internal::Int8Activations;

struct V {
  using IReg = __m256i;
  using FReg = __m256;
  static constexpr int kLanes = 8;
  // Two halves per block: 2 tokens take 8 integer and 4 float registers of 16.
  static constexpr int kMaxTokens = 2;
  static inline IReg IZero() { return _mm256_setzero_si256(); }
  static inline IReg IAdd(IReg a, IReg b) { return _mm256_add_epi32(a, b); }
  static inline FReg FZero() { return _mm256_setzero_ps(); }
  static inline IReg LoadW8(const uint8_t* unit, int half) {
    return _mm256_cvtepi8_epi16(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(unit + 16 * half)));
  }
  // Bytes of rows [8 half, +8) -> dwords; low nibble in the low word, high in the high.
  static inline IReg LoadW4(const uint8_t* unit, int half) {
    const __m256i d = _mm256_cvtepu8_epi32(
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(unit + 8 * half)));
    return _mm256_or_si256(_mm256_and_si256(d, _mm256_set1_epi32(0xF)),
                           _mm256_and_si256(_mm256_slli_epi32(d, 12), _mm256_set1_epi32(0xF0000)));
  }
  static inline IReg Dp(IReg acc, IReg w, int32_t pair) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(w, _mm256_set1_epi32(pair)));
  }
  static inline FReg ToFloat(IReg v) { return _mm256_cvtepi32_ps(v); }
  static inline FReg LoadF16(const uint16_t* s) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
  }
  static inline FReg LoadF(const float* p) { return _mm256_loadu_ps(p); }
  static inline FReg Mul(FReg a, float b) { return _mm256_mul_ps(a, _mm256_set1_ps(b)); }
  static inline FReg FnMadd(FReg a, float b, FReg c) {
    return _mm256_fnmadd_ps(a, _mm256_set1_ps(b), c);
  }
  static inline FReg Fma(FReg a, FReg b, FReg acc) { return _mm256_fmadd_ps(a, b, acc); }
  static inline void Store(float* p, FReg v) { _mm256_storeu_ps(p, v); }
  static inline void StorePartial(float* p, FReg v, int n) {
    alignas(32) float tmp[8];
    _mm256_store_ps(tmp, v);
    for (int i = 0; i < n; ++i) p[i] = tmp[i];
  }
};

#include "kernels/cpu/gemm_int8_blocks.inc"

}  // namespace tessera::kernels::gemm_int8_avx2

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

TESSERA_INT8_BLOCKS_EXPORT(gemm_int8_avx2, BlocksAvx2, BlocksInt4Avx2)
