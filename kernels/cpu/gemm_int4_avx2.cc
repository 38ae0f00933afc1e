// AVX2 + FMA building blocks of the INT4 GEMM (target pragma, as in gemm_avx2.cc).
#include <cstdint>

#include "kernels/cpu/gemm_int4.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

namespace tessera::kernels::int4_avx2 {
namespace {

// 16 codes from 8 packed bytes, in column order, as two vectors of 8 floats.
inline void Unpack16(const uint8_t* p, __m256* first, __m256* second) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m128i mask = _mm_set1_epi8(0x0f);
  const __m128i lo = _mm_and_si128(bytes, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
  const __m128i codes = _mm_unpacklo_epi8(lo, hi);  // Columns 0..15 in order.
  *first = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(codes));
  *second = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(codes, 8)));
}

inline float Sum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

void DequantRow(const uint8_t* packed, const float* scales, const float* zeros, int64_t cols,
                int group, float* dst) {
  if (group % 16 != 0) {
    int4_internal::ScalarInt4Kernels().dequant_row(packed, scales, zeros, cols, group, dst);
    return;
  }
  for (int64_t c0 = 0; c0 < cols; c0 += group) {
    const int64_t g = c0 / group;
    const __m256 s = _mm256_set1_ps(scales[g]);
    const __m256 z = _mm256_set1_ps(zeros[g]);
    for (int64_t c = c0; c < c0 + group; c += 16) {
      __m256 a, b;
      Unpack16(packed + c / 2, &a, &b);
      _mm256_storeu_ps(dst + c, _mm256_mul_ps(s, _mm256_sub_ps(a, z)));
      _mm256_storeu_ps(dst + c + 8, _mm256_mul_ps(s, _mm256_sub_ps(b, z)));
    }
  }
}

template <int kNw>
void DotRowsN(const float* x, const float* w, int64_t ldw, int64_t k, float* out) {
  __m256 acc[kNw];
  for (int j = 0; j < kNw; ++j) acc[j] = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= k; c += 8) {
    const __m256 xv = _mm256_loadu_ps(x + c);
    for (int j = 0; j < kNw; ++j) acc[j] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(w + j * ldw + c), acc[j]);
  }
  for (int j = 0; j < kNw; ++j) {
    float s = Sum(acc[j]);
    for (int64_t t = c; t < k; ++t) s += x[t] * w[j * ldw + t];
    out[j] = s;
  }
}

void DotRows(const float* x, const float* w, int64_t ldw, int nw, int64_t k, float* out) {
  switch (nw) {
    case 4: DotRowsN<4>(x, w, ldw, k, out); return;
    case 3: DotRowsN<3>(x, w, ldw, k, out); return;
    case 2: DotRowsN<2>(x, w, ldw, k, out); return;
    default: DotRowsN<1>(x, w, ldw, k, out); return;
  }
}

// The weights of 8 codes (32-bit lanes, the code in bits `shift`..`shift`+3) from a
// group's 16-entry table held as two 8-entry halves: VPERMPS reads an index's low 3 bits,
// and bit 3 of the code, moved to the sign bit, picks the half.
template <int kShift>
inline __m256 Lookup(__m256i codes, __m256 low_half, __m256 high_half) {
  const __m256i index = kShift == 0 ? codes : _mm256_srli_epi32(codes, kShift);
  const __m256 pick_high = _mm256_castsi256_ps(_mm256_slli_epi32(codes, 28 - kShift));
  return _mm256_blendv_ps(_mm256_permutevar8x32_ps(low_half, index),
                          _mm256_permutevar8x32_ps(high_half, index), pick_high);
}

// One weight row against kM rows of permuted x (see Int4Kernels::gemv), 32 columns a step.
template <int kM>
void GemvRow(const float* xp, int64_t k, const uint8_t* row, const float* scales,
             const float* zeros, int group, float* out, int64_t ldy) {
  const __m256 iota = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
  __m256 even[kM], odd[kM];
  for (int i = 0; i < kM; ++i) even[i] = odd[i] = _mm256_setzero_ps();
  for (int64_t c0 = 0, g = 0; c0 < k; c0 += group, ++g) {
    const __m256 s = _mm256_set1_ps(scales[g]);
    const __m256 low_half = _mm256_mul_ps(s, _mm256_sub_ps(iota, _mm256_set1_ps(zeros[g])));
    const __m256 high_half = _mm256_mul_ps(
        s, _mm256_sub_ps(_mm256_add_ps(iota, _mm256_set1_ps(8.0f)), _mm256_set1_ps(zeros[g])));
    for (int64_t c = c0; c < c0 + group; c += 32) {
      for (int half = 0; half < 2; ++half) {  // Bytes 0..7, then 8..15.
        const __m256i codes = _mm256_cvtepu8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + c / 2 + 8 * half)));
        const __m256 lo = Lookup<0>(codes, low_half, high_half);
        const __m256 hi = Lookup<4>(codes, low_half, high_half);
        for (int i = 0; i < kM; ++i) {
          even[i] = _mm256_fmadd_ps(_mm256_loadu_ps(xp + i * k + c + 8 * half), lo, even[i]);
          odd[i] = _mm256_fmadd_ps(_mm256_loadu_ps(xp + i * k + c + 16 + 8 * half), hi, odd[i]);
        }
      }
    }
  }
  for (int i = 0; i < kM; ++i) out[i * ldy] = Sum(_mm256_add_ps(even[i], odd[i]));
}

void Gemv(const float* xp, int64_t m, int64_t k, const uint8_t* packed, const float* scales,
          const float* zeros, int group, int64_t row_begin, int64_t row_end, float* y,
          int64_t ldy) {
  const int64_t groups = k / group;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = packed + r * (k / 2);
    const float* s = scales + r * groups;
    const float* z = zeros + r * groups;
    switch (m) {
      case 4: GemvRow<4>(xp, k, row, s, z, group, y + r, ldy); break;
      case 3: GemvRow<3>(xp, k, row, s, z, group, y + r, ldy); break;
      case 2: GemvRow<2>(xp, k, row, s, z, group, y + r, ldy); break;
      default: GemvRow<1>(xp, k, row, s, z, group, y + r, ldy); break;
    }
  }
}

}  // namespace
}  // namespace tessera::kernels::int4_avx2

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace tessera::kernels::int4_internal {
const Int4Kernels& Avx2Int4Kernels() {
  static const Int4Kernels kernels{int4_avx2::DequantRow, int4_avx2::DotRows, int4_avx2::Gemv};
  return kernels;
}
}  // namespace tessera::kernels::int4_internal

#else  // Not x86-64: the dispatcher never selects this level.

namespace tessera::kernels::int4_internal {
const Int4Kernels& Avx2Int4Kernels() { return ScalarInt4Kernels(); }
}  // namespace tessera::kernels::int4_internal

#endif
