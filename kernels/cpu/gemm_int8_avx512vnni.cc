// AVX-512 VNNI block kernels for int8 and int4 weights: VPDPWSSD multiplies 16 rows x 2
// columns by a broadcast pair of int16 activations and adds in one instruction. Only this file's own functions
// are compiled for these instructions (target pragma, as in gemm_avx512.cc).
#include <cstdint>

#include "kernels/cpu/gemm_int8_internal.h"
#include "kernels/cpu/int8_blocked.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vnni,avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vnni,avx2,fma")
#endif

namespace tessera::kernels::gemm_int8_avx512vnni {

using gemm_int8_internal::Int8Activations;

struct V {
  using IReg = __m512i;
  using FReg = __m512;
  static constexpr int kLanes = 16;
  // 8 tokens: 8 integer and 8 float accumulators plus the weights fit 32 registers.
  static constexpr int kMaxTokens = 8;
  static inline IReg IZero() { return _mm512_setzero_si512(); }
  static inline IReg IAdd(IReg a, IReg b) { return _mm512_add_epi32(a, b); }
  static inline FReg FZero() { return _mm512_setzero_ps(); }
  static inline void Prefetch(const uint8_t* p) {
    _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
  }
  static inline IReg LoadW8(const uint8_t* unit, int) {
    return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit)));
  }
  // Byte i (row i) -> dword i, then its low nibble stays in the low word and its high
  // nibble moves to the high word: bit-select (0xCA) of d and d << 12 under 0xF00F.
  static inline IReg LoadW4(const uint8_t* unit, int) {
    const __m512i d =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(unit)));
    return _mm512_ternarylogic_epi32(_mm512_set1_epi32(0xF00F), d, _mm512_slli_epi32(d, 12),
                                     0xCA);
  }
  static inline IReg Dp(IReg acc, IReg w, int32_t pair) {
    return _mm512_dpwssd_epi32(acc, w, _mm512_set1_epi32(pair));
  }
  static inline FReg ToFloat(IReg v) { return _mm512_cvtepi32_ps(v); }
  static inline FReg LoadBf16(const uint16_t* s) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static inline FReg LoadF(const float* p) { return _mm512_loadu_ps(p); }
  static inline FReg Mul(FReg a, float b) { return _mm512_mul_ps(a, _mm512_set1_ps(b)); }
  static inline FReg FnMadd(FReg a, float b, FReg c) {
    return _mm512_fnmadd_ps(a, _mm512_set1_ps(b), c);
  }
  static inline FReg Fma(FReg a, FReg b, FReg acc) { return _mm512_fmadd_ps(a, b, acc); }
  static inline void Store(float* p, FReg v) { _mm512_storeu_ps(p, v); }
  static inline void StorePartial(float* p, FReg v, int n) {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), v);
  }
};

#include "kernels/cpu/gemm_int8_blocks.inc"

}  // namespace tessera::kernels::gemm_int8_avx512vnni

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace tessera::kernels::gemm_int8_internal {
void BlocksAvx512Vnni(const Int8Activations& x, int64_t m, const MatrixView& w, float* y,
                      int64_t block_begin, int64_t block_end) {
  gemm_int8_avx512vnni::Blocks(x, m, w, y, block_begin, block_end);
}
void BlocksInt4Avx512Vnni(const Int8Activations& x, int64_t m, const MatrixView& w, float* y,
                          int64_t block_begin, int64_t block_end) {
  gemm_int8_avx512vnni::BlocksInt4(x, m, w, y, block_begin, block_end);
}
}  // namespace tessera::kernels::gemm_int8_internal

#else  // Not x86-64: the dispatcher never selects this level.

#include <cstdlib>

namespace tessera::kernels::gemm_int8_internal {
void BlocksAvx512Vnni(const Int8Activations&, int64_t, const MatrixView&, float*, int64_t, int64_t) {
  std::abort();
}
void BlocksInt4Avx512Vnni(const Int8Activations&, int64_t, const MatrixView&, float*, int64_t, int64_t) {
  std::abort();
}
}  // namespace tessera::kernels::gemm_int8_internal

#endif
