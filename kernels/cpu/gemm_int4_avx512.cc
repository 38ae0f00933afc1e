// AVX-512F building blocks of the INT4 GEMM. Only this file's own functions are compiled
// for AVX-512 (target pragma, as in gemm_avx512.cc).
#include <cstdint>

#include "kernels/cpu/gemm_int4.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
#endif

namespace tessera::kernels::int4_avx512 {
namespace {

// 16 codes from 8 packed bytes, in column order, as floats.
inline __m512 Unpack16(const uint8_t* p) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m128i mask = _mm_set1_epi8(0x0f);
  const __m128i lo = _mm_and_si128(bytes, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
  // Byte b's low nibble is column 2b, its high nibble column 2b + 1.
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)));
}

void DequantRow(const uint8_t* packed, const float* scales, const float* zeros, int64_t cols,
                int group, float* dst) {
  if (group % 16 != 0) {
    int4_internal::ScalarInt4Kernels().dequant_row(packed, scales, zeros, cols, group, dst);
    return;
  }
  for (int64_t c0 = 0; c0 < cols; c0 += group) {
    const int64_t g = c0 / group;
    const __m512 s = _mm512_set1_ps(scales[g]);
    const __m512 z = _mm512_set1_ps(zeros[g]);
    for (int64_t c = c0; c < c0 + group; c += 16) {
      _mm512_storeu_ps(dst + c, _mm512_mul_ps(s, _mm512_sub_ps(Unpack16(packed + c / 2), z)));
    }
  }
}

template <int kNw>
void DotRowsN(const float* x, const float* w, int64_t ldw, int64_t k, float* out) {
  __m512 acc[kNw];
  for (int j = 0; j < kNw; ++j) acc[j] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 16 <= k; c += 16) {
    const __m512 xv = _mm512_loadu_ps(x + c);
    for (int j = 0; j < kNw; ++j) acc[j] = _mm512_fmadd_ps(xv, _mm512_loadu_ps(w + j * ldw + c), acc[j]);
  }
  if (c < k) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (k - c)) - 1);
    const __m512 xv = _mm512_maskz_loadu_ps(tail, x + c);
    for (int j = 0; j < kNw; ++j) {
      acc[j] = _mm512_fmadd_ps(xv, _mm512_maskz_loadu_ps(tail, w + j * ldw + c), acc[j]);
    }
  }
  for (int j = 0; j < kNw; ++j) out[j] = _mm512_reduce_add_ps(acc[j]);
}

void DotRows(const float* x, const float* w, int64_t ldw, int nw, int64_t k, float* out) {
  switch (nw) {
    case 4: DotRowsN<4>(x, w, ldw, k, out); return;
    case 3: DotRowsN<3>(x, w, ldw, k, out); return;
    case 2: DotRowsN<2>(x, w, ldw, k, out); return;
    default: DotRowsN<1>(x, w, ldw, k, out); return;
  }
}

// One weight row against kM rows of permuted x (see Int4Kernels::gemv). Each group's 16
// possible weights s * (q - z) sit in one register and the codes index it (VPERMPS reads
// only an index's low 4 bits): per 32 columns one 16-byte load widened once, a shift for
// the high nibbles (odd columns), two permutes and 2 * kM FMAs; no int-to-float converts.
template <int kM>
void GemvRow(const float* xp, int64_t k, const uint8_t* row, const float* scales,
             const float* zeros, int group, float* out, int64_t ldy) {
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512 even[kM], odd[kM];
  for (int i = 0; i < kM; ++i) even[i] = odd[i] = _mm512_setzero_ps();
  for (int64_t c0 = 0, g = 0; c0 < k; c0 += group, ++g) {
    const __m512 table =
        _mm512_mul_ps(_mm512_set1_ps(scales[g]), _mm512_sub_ps(iota, _mm512_set1_ps(zeros[g])));
    for (int64_t c = c0; c < c0 + group; c += 32) {
      const __m512i codes = _mm512_cvtepu8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c / 2)));
      const __m512 lo = _mm512_permutexvar_ps(codes, table);
      const __m512 hi = _mm512_permutexvar_ps(_mm512_srli_epi32(codes, 4), table);
      for (int i = 0; i < kM; ++i) {
        even[i] = _mm512_fmadd_ps(_mm512_loadu_ps(xp + i * k + c), lo, even[i]);
        odd[i] = _mm512_fmadd_ps(_mm512_loadu_ps(xp + i * k + c + 16), hi, odd[i]);
      }
    }
  }
  for (int i = 0; i < kM; ++i) out[i * ldy] = _mm512_reduce_add_ps(_mm512_add_ps(even[i], odd[i]));
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
}  // namespace tessera::kernels::int4_avx512

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace tessera::kernels::int4_internal {
const Int4Kernels& Avx512Int4Kernels() {
  static const Int4Kernels kernels{int4_avx512::DequantRow, int4_avx512::DotRows,
                                   int4_avx512::Gemv};
  return kernels;
}
}  // namespace tessera::kernels::int4_internal

#else  // Not x86-64: the dispatcher never selects this level.

namespace tessera::kernels::int4_internal {
const Int4Kernels& Avx512Int4Kernels() { return ScalarInt4Kernels(); }
}  // namespace tessera::kernels::int4_internal

#endif
