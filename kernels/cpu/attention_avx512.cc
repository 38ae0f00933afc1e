// AVX-512 attention for one token's query heads, for head sizes of 32, 64 and 128. The
// portable path (attention.cc) calls a dot product and an axpy per (key, head); at 1k
// context that was a third of a 1B model's decode step. Here a query head stays in
// registers while 16 keys are scored at once (their partial sums folded into one vector by
// a transpose-and-add tree), the softmax runs on vectors with a polynomial exp, and the
// output head accumulates in registers over the V rows. Heads of one GQA group run back to
// back, so their K and V rows come from L1/L2 after the first head read them from memory.
//
// Only this file's own functions are compiled for AVX-512 (target pragma): see
// gemm_avx512.cc.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/attention_internal.h"

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

namespace tessera::kernels::attention_avx512 {
namespace {

constexpr int kKeys = 16;  // Keys scored per vector.
// How far ahead K rows are requested, in blocks of kKeys (see the scoring loop).
constexpr int kKBlocksAhead = 1;

// e^x for x <= 0 (scores after subtracting their max): Cephes' expf polynomial on
// x - n ln 2, scaled by 2^n; within 2 ulp of expf, and 0 below -87.
inline __m512 ExpNonPositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.33654f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(y, n);
}

// Lane j of the result is the sum of the 16 lanes of v[j].
inline __m512 Sum16(const __m512 (&v)[kKeys]) {
  __m512 p[8];
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) {  // [v.lo256 + v.hi256 | w.lo256 + w.hi256]
    p[j] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0x44),
                         _mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0xEE));
  }
  __m512 q[4];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {  // One input per 128-bit lane: v[4j + lane].
    q[j] = _mm512_add_ps(_mm512_shuffle_f32x4(p[2 * j], p[2 * j + 1], 0x88),
                         _mm512_shuffle_f32x4(p[2 * j], p[2 * j + 1], 0xDD));
  }
  // Lane b: [v_b, v_4+b, v_b, v_4+b] (q0, q1), likewise v_8+b, v_12+b from q2, q3.
  const __m512 r0 = _mm512_add_ps(_mm512_unpacklo_ps(q[0], q[1]), _mm512_unpackhi_ps(q[0], q[1]));
  const __m512 r1 = _mm512_add_ps(_mm512_unpacklo_ps(q[2], q[3]), _mm512_unpackhi_ps(q[2], q[3]));
  // Lane b: [sum v_b, sum v_4+b, sum v_8+b, sum v_12+b], so element 4b + c = sum v_4c+b.
  const __m512 s = _mm512_add_ps(
      _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(r0), _mm512_castps_pd(r1))),
      _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(r0), _mm512_castps_pd(r1))));
  const __m512i order =
      _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, s);
}

template <int D>  // head_dim / 16
void AttendHeads(const float* q_row, const int32_t* block_table, int position, int window,
                 int head_begin, int head_end, int group, const float* k_cache,
                 const float* v_cache, const KvCacheShape& shape, float scale,
                 std::vector<float>& scores, float* out_row) {
  constexpr int kHeadDim = D * 16;
  const int heads = head_end - head_begin;
  const int first = window > 0 ? std::max(0, position - window + 1) : 0;
  const int n_ctx = position + 1 - first;
  if (n_ctx <= 0) {
    std::memset(out_row + static_cast<int64_t>(head_begin) * kHeadDim, 0,
                sizeof(float) * heads * kHeadDim);
    return;
  }
  const int n_pad = (n_ctx + kKeys - 1) / kKeys * kKeys;
  // Per call: the cache offset of every visible key (the block table walked once), then
  // one score row per head.
  thread_local std::vector<int64_t> offsets;
  if (offsets.size() < static_cast<size_t>(n_ctx)) offsets.resize(n_ctx);
  const int block_size = shape.block_size;
  const int64_t row = static_cast<int64_t>(shape.num_kv_heads) * kHeadDim;
  for (int p = 0; p < n_ctx; ++p) {
    const int pos = first + p;
    offsets[p] = (static_cast<int64_t>(block_table[pos / block_size]) * block_size +
                  pos % block_size) * row;
  }
  const size_t needed = static_cast<size_t>(heads) * n_pad + static_cast<size_t>(heads) * kHeadDim;
  if (scores.size() < needed) scores.resize(needed);
  // Score rows, one per head, then the scaled query heads.
  float* s_all = scores.data();
  float* q_scaled = s_all + static_cast<size_t>(heads) * n_pad;
  for (int h = head_begin; h < head_end; ++h) {
#pragma GCC unroll 8
    for (int d = 0; d < D; ++d) {
      _mm512_storeu_ps(q_scaled + (h - head_begin) * kHeadDim + 16 * d,
                       _mm512_mul_ps(_mm512_loadu_ps(q_row + static_cast<int64_t>(h) * kHeadDim + 16 * d),
                                     _mm512_set1_ps(scale)));
    }
  }

  // Scores, 16 keys at a time for every head of the run: a block's K rows are read from
  // memory by the first head of their GQA group and from L1 by the others. The last
  // block's missing keys score -inf.
  for (int p0 = 0; p0 < n_ctx; p0 += kKeys) {
    const int count = std::min(kKeys, n_ctx - p0);
    const __mmask16 valid = static_cast<__mmask16>((1u << count) - 1);
    // The cache is cold in a forward pass (the weights streamed through since this layer
    // last ran) and a head's rows are 256 B of every 1 KB: ask for the next block's K rows
    // now rather than waiting on each line.
    const int next_end = std::min(n_ctx, p0 + (1 + kKBlocksAhead) * kKeys);
    for (int p = std::max(p0 + kKBlocksAhead * kKeys, kKeys); p < next_end; ++p) {
      for (int h = head_begin; h < head_end; h += group) {
        const char* k = reinterpret_cast<const char*>(
            k_cache + static_cast<int64_t>(h / group) * kHeadDim + offsets[p]);
#pragma GCC unroll 8
        for (int line = 0; line < D; ++line) _mm_prefetch(k + 64 * line, _MM_HINT_T0);
      }
    }
    for (int h = head_begin; h < head_end; ++h) {
      const float* k_base = k_cache + static_cast<int64_t>(h / group) * kHeadDim;
      const float* q = q_scaled + (h - head_begin) * kHeadDim;
      __m512 qv[D];
#pragma GCC unroll 8
      for (int d = 0; d < D; ++d) qv[d] = _mm512_loadu_ps(q + 16 * d);
      __m512 part[kKeys];
#pragma GCC unroll 16
      for (int i = 0; i < kKeys; ++i) {
        if (i < count) {
          const float* k = k_base + offsets[p0 + i];
          __m512 acc = _mm512_mul_ps(qv[0], _mm512_loadu_ps(k));
#pragma GCC unroll 8
          for (int d = 1; d < D; ++d) acc = _mm512_fmadd_ps(qv[d], _mm512_loadu_ps(k + 16 * d), acc);
          part[i] = acc;
        } else {
          part[i] = _mm512_setzero_ps();
        }
      }
      _mm512_storeu_ps(s_all + static_cast<size_t>(h - head_begin) * n_pad + p0,
                       _mm512_mask_blend_ps(valid, _mm512_set1_ps(-__builtin_inff()), Sum16(part)));
    }
  }

  for (int h = head_begin; h < head_end; ++h) {
    float* s = s_all + static_cast<size_t>(h - head_begin) * n_pad;
    const float* v_base = v_cache + static_cast<int64_t>(h / group) * kHeadDim;
    // Softmax numerators and their sum.
    __m512 max_v = _mm512_loadu_ps(s);
    for (int p0 = kKeys; p0 < n_pad; p0 += kKeys) max_v = _mm512_max_ps(max_v, _mm512_loadu_ps(s + p0));
    const __m512 max_b = _mm512_set1_ps(_mm512_reduce_max_ps(max_v));
    __m512 sum_v = _mm512_setzero_ps();
    for (int p0 = 0; p0 < n_pad; p0 += kKeys) {
      const __m512 e = ExpNonPositive(_mm512_sub_ps(_mm512_loadu_ps(s + p0), max_b));
      _mm512_storeu_ps(s + p0, e);
      sum_v = _mm512_add_ps(sum_v, e);
    }
    // Weighted V rows, two keys at a time into two sets of registers: one FMA chain per
    // vector would wait on the FMA latency every key.
    __m512 o0[D], o1[D];
#pragma GCC unroll 8
    for (int d = 0; d < D; ++d) o0[d] = o1[d] = _mm512_setzero_ps();
    int p = 0;
    constexpr int kVAhead = 16;  // Keys ahead whose V rows are requested (cold cache).
    for (; p + 1 < n_ctx; p += 2) {
      if (p + kVAhead + 1 < n_ctx) {
#pragma GCC unroll 8
        for (int line = 0; line < D; ++line) {
          _mm_prefetch(reinterpret_cast<const char*>(v_base + offsets[p + kVAhead]) + 64 * line,
                       _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(v_base + offsets[p + kVAhead + 1]) + 64 * line,
                       _MM_HINT_T0);
        }
      }
      const __m512 w0 = _mm512_set1_ps(s[p]), w1 = _mm512_set1_ps(s[p + 1]);
      const float* v0 = v_base + offsets[p];
      const float* v1 = v_base + offsets[p + 1];
#pragma GCC unroll 8
      for (int d = 0; d < D; ++d) {
        o0[d] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(v0 + 16 * d), o0[d]);
        o1[d] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(v1 + 16 * d), o1[d]);
      }
    }
    if (p < n_ctx) {
      const __m512 w0 = _mm512_set1_ps(s[p]);
      const float* v0 = v_base + offsets[p];
#pragma GCC unroll 8
      for (int d = 0; d < D; ++d) o0[d] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(v0 + 16 * d), o0[d]);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum_v));
    float* out = out_row + static_cast<int64_t>(h) * kHeadDim;
#pragma GCC unroll 8
    for (int d = 0; d < D; ++d) {
      _mm512_storeu_ps(out + 16 * d, _mm512_mul_ps(_mm512_add_ps(o0[d], o1[d]), inv));
    }
  }
}

}  // namespace
}  // namespace tessera::kernels::attention_avx512

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace tessera::kernels::attention_internal {

AttendHeadsFn Avx512AttendHeads(int head_dim) {
  switch (head_dim) {
    case 32: return &attention_avx512::AttendHeads<2>;
    case 64: return &attention_avx512::AttendHeads<4>;
    case 128: return &attention_avx512::AttendHeads<8>;
    default: return nullptr;
  }
}

}  // namespace tessera::kernels::attention_internal

#else  // Not x86-64: the dispatcher never selects this level.

namespace tessera::kernels::attention_internal {
AttendHeadsFn Avx512AttendHeads(int) { return nullptr; }
}  // namespace tessera::kernels::attention_internal

#endif
