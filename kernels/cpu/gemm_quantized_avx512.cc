// AVX-512F rows of the weight-only quantized GEMM (see gemm_quantized.h). Target pragma,
// not -mavx512f, for the reason gemm_avx512.cc gives.
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

namespace tessera::kernels::gemm_quantized_internal {
namespace {

// 16 weights as floats. int8: sign-extend and convert. FP8 E4M3: ((b & 0x80) << 8) |
// ((b & 0x7f) << 7) are the FP16 bits of value / 256, exact for normals and subnormals
// alike (E4M3's exponent bias 7 sits 8 below FP16's 15); the caller folds the 256 into the
// row scale.
template <DType D>
inline __m512 Load16(const uint8_t* p) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (D == DType::kI8) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes));
  } else {
    const __m256i w = _mm256_cvtepu8_epi16(bytes);
    const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x80)), 8);
    const __m256i rest = _mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x7f)), 7);
    return _mm512_cvtph_ps(_mm256_or_si256(sign, rest));
  }
}

// Up to 4 rows of x against one weight row, decoding each weight vector once.
template <DType D, int R>
void Rows(const float* x, int64_t ldx, const uint8_t* q, int64_t k, float scale, float* y,
          int64_t ldy) {
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 16 <= k; c += 16) {
    const __m512 w = Load16<D>(q + c);
    for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(x + r * ldx + c), w, acc[r]);
  }
  const float vector_scale = D == DType::kI8 ? scale : scale * 256.0f;
  for (int r = 0; r < R; ++r) {
    float tail = 0.0f;
    for (int64_t t = c; t < k; ++t) tail += x[r * ldx + t] * QuantizedValueOf<D>(q[t]);
    y[r * ldy] = vector_scale * _mm512_reduce_add_ps(acc[r]) + scale * tail;
  }
}

template <DType D>
void RowAllX(const float* x, int64_t m, const uint8_t* q, int64_t k, float scale, float* y,
             int64_t ldy) {
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) Rows<D, 4>(x + i * k, k, q, k, scale, y + i * ldy, ldy);
  switch (m - i) {
    case 3: Rows<D, 3>(x + i * k, k, q, k, scale, y + i * ldy, ldy); break;
    case 2: Rows<D, 2>(x + i * k, k, q, k, scale, y + i * ldy, ldy); break;
    case 1: Rows<D, 1>(x + i * k, k, q, k, scale, y + i * ldy, ldy); break;
    default: break;
  }
}

}  // namespace

RowFn Avx512RowFn(DType dtype) {
  return dtype == DType::kI8 ? &RowAllX<DType::kI8> : &RowAllX<DType::kF8E4M3>;
}

}  // namespace tessera::kernels::gemm_quantized_internal

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else  // Not x86-64: the dispatcher never selects this level.

namespace tessera::kernels::gemm_quantized_internal {
RowFn Avx512RowFn(DType) { return nullptr; }
}  // namespace tessera::kernels::gemm_quantized_internal

#endif
