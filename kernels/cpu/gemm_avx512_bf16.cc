// AVX512-BF16 GEMM micro-kernels for BF16 weights. VDPBF16PS multiplies 32 BF16 pairs and
// adds them into 16 float32 lanes: twice the multiply-adds of an FP32 FMA per instruction,
// with no widening of the weights. The activations are rounded to BF16 once per product
// (RoundRowsToBf16), as llama.cpp and torch's bf16 matmuls do; the sums stay float32.
// Weights are read in place, row-major, as the loader stores them: the dot-product form
// (lanes along K, one horizontal sum per output at the end) needs no repacking.
//
// Only this file's own functions are compiled for AVX-512 (target pragma, not a per-file
// flag): see gemm_avx512.cc.
#include <cstdint>

#include "common/dtype.h"
#include "kernels/cpu/gemm_microkernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(                                                          \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c,bmi2"))), \
    apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c,bmi2")
#endif

namespace tessera::kernels::gemm_avx512_bf16 {

// BF16 elements per step: one zmm of pairs.
constexpr int kStep = 32;
// 4 x 6 accumulators + 4 rows of x + 1 weight vector = 29 of the 32 zmm registers, and
// 10 loads per 24 VDPBF16PS keep the load ports (one zmm load a cycle on Zen 4) ahead.
constexpr int kMr = 4;
constexpr int kNr = 6;

inline __m512bh AsBf16(__m512i v) { return reinterpret_cast<__m512bh&>(v); }

// Lane j of the result (j < n <= 8) is the sum of the 16 lanes of a[j]: a transpose-and-add
// tree, about 3 instructions per input instead of a full reduction each.
template <int N>
inline __m256 SumLanes(const __m512 (&a)[N]) {
  static_assert(N >= 1 && N <= 8);
  __m512 v[8];
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) v[j] = j < N ? a[j] : _mm512_setzero_ps();
  // Level 1: 512 -> 256 bits, two inputs per register: [a.lo + a.hi | b.lo + b.hi].
  __m512 p[4];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    p[j] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0x44),
                         _mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0xEE));
  }
  // Level 2: 256 -> 128 bits, four inputs per register, one 128-bit lane each.
  __m512 q[2];
#pragma GCC unroll 2
  for (int j = 0; j < 2; ++j) {
    q[j] = _mm512_add_ps(_mm512_shuffle_f32x4(p[2 * j], p[2 * j + 1], 0x88),
                         _mm512_shuffle_f32x4(p[2 * j], p[2 * j + 1], 0xDD));
  }
  // q[0] lanes: [in0 | in1 | in2 | in3] (4 floats each), q[1]: [in4 | ... | in7].
  // Level 3: 4 floats -> 2 within each 128-bit lane, interleaving q[0] and q[1].
  const __m512 r = _mm512_add_ps(_mm512_unpacklo_ps(q[0], q[1]), _mm512_unpackhi_ps(q[0], q[1]));
  // r lane block b: [in_b, in_{b+4}, in_b, in_{b+4}] partials: add the two halves.
  const __m512 s = _mm512_add_ps(r, _mm512_permute_ps(r, 0x4E));
  // s lane block b, elements 0 and 1: sum(in_b), sum(in_{b+4}). Gather them in order.
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_castps512_ps256(_mm512_permutexvar_ps(order, s));
}

template <int MR, int NR>
void MicroKernel(const void* x_rows, int64_t ldx, const void* w_rows, int64_t ldw, int64_t k0,
                 int64_t kc, float* y, int64_t ldy, bool accumulate) {
  const auto* x = static_cast<const uint16_t*>(x_rows);
  const auto* w = static_cast<const uint16_t*>(w_rows);
  __m512 acc[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  const int64_t k_end = k0 + kc;
  int64_t k = k0;
  for (; k + kStep <= k_end; k += kStep) {
    __m512bh xv[MR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) xv[i] = AsBf16(_mm512_loadu_si512(x + i * ldx + k));
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      const __m512bh wv = AsBf16(_mm512_loadu_si512(w + j * ldw + k));
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv[i], wv);
    }
  }
  if (k < k_end) {
    // The K tail: masked loads, so nothing past a row is read (a stray NaN or Inf would
    // poison the sum even against a zero).
    const __mmask32 mask = _bzhi_u32(~0u, static_cast<unsigned>(k_end - k));
    __m512bh xv[MR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) xv[i] = AsBf16(_mm512_maskz_loadu_epi16(mask, x + i * ldx + k));
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      const __m512bh wv = AsBf16(_mm512_maskz_loadu_epi16(mask, w + j * ldw + k));
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv[i], wv);
    }
  }
  const __mmask8 out_mask = static_cast<__mmask8>((1u << NR) - 1);
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    __m256 sums = SumLanes<NR>(acc[i]);
    float* out = y + i * ldy;
    if (accumulate) sums = _mm256_add_ps(sums, _mm256_maskz_loadu_ps(out_mask, out));
    _mm256_mask_storeu_ps(out, out_mask, sums);
  }
}

template <int MR>
void FillKernels(gemm_internal::KernelSet& set) {
  if constexpr (MR <= kMr) {
    constexpr int kBf16 = 2;  // The dtype index of BF16.
    set.fn[kBf16][MR - 1][0] = &MicroKernel<MR, kNr>;
    set.fn[kBf16][MR - 1][1] = &MicroKernel<MR, 1>;
    FillKernels<MR + 1>(set);
  }
}

gemm_internal::KernelSet MakeKernelSet() {
  gemm_internal::KernelSet set;
  set.mr = kMr;
  set.nr = kNr;
  set.width = kStep;
  set.bf16_activations = true;
  // Measured on Zen 4 at the 1B shapes (m = 128): with 1024-element chunks the horizontal
  // sums cost up to a fifth of the time; whole K, with x's rows held in L1 and the weights
  // coming from L2, ran 1.2-1.9x faster.
  set.chunk_k = false;
  // Decode takes W a row at a time, each row one sequential stream rather than kNr
  // interleaved ones. Measured on Zen 4: at one row of x about 10 % more bandwidth on the
  // 1B model's GEMVs (30-33 against 26-30 GB/s, alternated in one process); at the 2-3 rows
  // an expert gets in a 32-stream decode of Qwen3-30B-A3B, 98-131 against 135-152 ms for
  // the step's experts, at 90-100 % of the memory read paired with each run against 72-90 %
  // (alternated runs of tessera-roofline --batch 32: gemm_stream_rows_qwen3moe_b32.json).
  //
  // The bits do not change: each W row goes through MicroKernel<MR, 1>, which sums every
  // output in the same order as the wide kernels (SumLanes reduces each input alike
  // wherever it sits), so a row of x gets the same bits alone as among others. Speculative
  // verification scores several tokens of a sequence in one pass, and its greedy argmax
  // must match what decoding them one by one picks.
  set.stream_rows_alone = true;
  FillKernels<1>(set);
  return set;
}

void RoundRows(const float* src, int64_t rows, int64_t cols, int64_t ld_src, uint16_t* dst,
               int64_t ld_dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * ld_src;
    uint16_t* d = dst + r * ld_dst;
    for (int64_t j = 0; j < ld_dst; j += kStep) {
      const int64_t left = cols - j;
      const __mmask16 lo_mask = left >= 16 ? 0xFFFF : left <= 0 ? 0 : _bzhi_u32(0xFFFF, left);
      const __mmask16 hi_mask =
          left >= 32 ? 0xFFFF : left <= 16 ? 0 : _bzhi_u32(0xFFFF, left - 16);
      const __m512 lo = _mm512_maskz_loadu_ps(lo_mask, s + j);
      const __m512 hi = _mm512_maskz_loadu_ps(hi_mask, s + j + 16);
      const __m512bh packed = _mm512_cvtne2ps_pbh(hi, lo);
      _mm512_storeu_si512(d + j, reinterpret_cast<const __m512i&>(packed));
    }
  }
}

}  // namespace tessera::kernels::gemm_avx512_bf16

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace tessera::kernels::gemm_internal {
const KernelSet& Avx512Bf16Kernels() {
  static const KernelSet set = gemm_avx512_bf16::MakeKernelSet();
  return set;
}
void RoundRowsToBf16(const float* src, int64_t rows, int64_t cols, int64_t ld_src,
                     uint16_t* dst, int64_t ld_dst) {
  gemm_avx512_bf16::RoundRows(src, rows, cols, ld_src, dst, ld_dst);
}
}  // namespace tessera::kernels::gemm_internal

#else  // Not x86-64: the dispatcher never selects this level.

namespace tessera::kernels::gemm_internal {
const KernelSet& Avx512Bf16Kernels() { return Avx512Kernels(); }
void RoundRowsToBf16(const float*, int64_t, int64_t, int64_t, uint16_t*, int64_t) {}
}  // namespace tessera::kernels::gemm_internal

#endif
