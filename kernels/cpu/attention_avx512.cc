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
#include "kernels/cpu/kv_cache_format.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma,f16c")
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

// How a cache row of each element type is read. D is head_dim / 16. Dot returns a vector
// whose lane sum is q . k; Axpy adds w * v into the accumulators; Store writes the
// accumulators, scaled, back in head order.
struct F32Rows {
  static constexpr int kBytes = 4;
  static constexpr bool kScaled = false;
  template <int D>
  static void PrepareQuery(const float* q, __m512 (&qv)[D]) {
#pragma GCC unroll 8
    for (int d = 0; d < D; ++d) qv[d] = _mm512_loadu_ps(q + 16 * d);
  }
  template <int D>
  static __m512 Dot(const __m512 (&qv)[D], const char* row) {
    const float* k = reinterpret_cast<const float*>(row);
    __m512 acc = _mm512_mul_ps(qv[0], _mm512_loadu_ps(k));
#pragma GCC unroll 8
    for (int d = 1; d < D; ++d) acc = _mm512_fmadd_ps(qv[d], _mm512_loadu_ps(k + 16 * d), acc);
    return acc;
  }
  template <int D>
  static void Axpy(__m512 w, const char* row, __m512 (&o)[D]) {
    const float* v = reinterpret_cast<const float*>(row);
#pragma GCC unroll 8
    for (int d = 0; d < D; ++d) o[d] = _mm512_fmadd_ps(w, _mm512_loadu_ps(v + 16 * d), o[d]);
  }
  template <int D>
  static void Store(const __m512 (&o)[D], __m512 inv, float* out) {
#pragma GCC unroll 8
    for (int d = 0; d < D; ++d) _mm512_storeu_ps(out + 16 * d, _mm512_mul_ps(o[d], inv));
  }
};

// 32 BF16 values load as one vector whose 32-bit lanes hold pairs (even, odd): shifting
// left by 16 gives the even elements as floats, masking the low half the odd ones, so a
// row costs half the loads of F32 plus one integer op per 16 values. The query and the
// accumulators live in the same even/odd order; Store interleaves them back.
struct Bf16Rows {
  static constexpr int kBytes = 2;
  static constexpr bool kScaled = false;
  template <int D>
  static void PrepareQuery(const float* q, __m512 (&qv)[D]) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
#pragma GCC unroll 4
    for (int j = 0; j < D / 2; ++j) {
      const __m512 a = _mm512_loadu_ps(q + 32 * j), b = _mm512_loadu_ps(q + 32 * j + 16);
      qv[2 * j] = _mm512_permutex2var_ps(a, even, b);
      qv[2 * j + 1] = _mm512_permutex2var_ps(a, odd, b);
    }
  }
  static __m512 Even(__m512i x) { return _mm512_castsi512_ps(_mm512_slli_epi32(x, 16)); }
  static __m512 Odd(__m512i x) {
    return _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  template <int D>
  static __m512 Dot(const __m512 (&qv)[D], const char* row) {
    __m512 acc = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int j = 0; j < D / 2; ++j) {
      const __m512i x = _mm512_loadu_si512(row + 64 * j);
      acc = _mm512_fmadd_ps(qv[2 * j], Even(x), acc);
      acc = _mm512_fmadd_ps(qv[2 * j + 1], Odd(x), acc);
    }
    return acc;
  }
  template <int D>
  static void Axpy(__m512 w, const char* row, __m512 (&o)[D]) {
#pragma GCC unroll 4
    for (int j = 0; j < D / 2; ++j) {
      const __m512i x = _mm512_loadu_si512(row + 64 * j);
      o[2 * j] = _mm512_fmadd_ps(w, Even(x), o[2 * j]);
      o[2 * j + 1] = _mm512_fmadd_ps(w, Odd(x), o[2 * j + 1]);
    }
  }
  template <int D>
  static void Store(const __m512 (&o)[D], __m512 inv, float* out) {
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
#pragma GCC unroll 4
    for (int j = 0; j < D / 2; ++j) {
      const __m512 e = _mm512_mul_ps(o[2 * j], inv), od = _mm512_mul_ps(o[2 * j + 1], inv);
      _mm512_storeu_ps(out + 32 * j, _mm512_permutex2var_ps(e, lo, od));
      _mm512_storeu_ps(out + 32 * j + 16, _mm512_permutex2var_ps(e, hi, od));
    }
  }
};

// E4M3 bytes become FP16 bits with the exponent and mantissa shifted into place
// ((b & 0x7f) << 7, sign to bit 15): that half equals the E4M3 value times 2^-8 for normal
// and subnormal values alike, so one VCVTPH2PS converts 16 of them and the 2^8 joins the
// row's scale (kScaleFactor).
struct Fp8Rows {
  static constexpr int kBytes = 1;
  static constexpr bool kScaled = true;
  static constexpr float kScaleFactor = 256.0f;
  template <int D>
  static void PrepareQuery(const float* q, __m512 (&qv)[D]) {
    F32Rows::PrepareQuery<D>(q, qv);
  }
  static __m512 Load16(const char* p) {
    const __m256i t = _mm256_slli_epi16(
        _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 7);
    // The sign landed on bit 14: adding it to itself carries it to bit 15.
    return _mm512_cvtph_ps(_mm256_add_epi16(t, _mm256_and_si256(t, _mm256_set1_epi16(0x4000))));
  }
  template <int D>
  static __m512 Dot(const __m512 (&qv)[D], const char* row) {
    __m512 acc = _mm512_mul_ps(qv[0], Load16(row));
#pragma GCC unroll 8
    for (int d = 1; d < D; ++d) acc = _mm512_fmadd_ps(qv[d], Load16(row + 16 * d), acc);
    return acc;
  }
  template <int D>
  static void Axpy(__m512 w, const char* row, __m512 (&o)[D]) {
#pragma GCC unroll 8
    for (int d = 0; d < D; ++d) o[d] = _mm512_fmadd_ps(w, Load16(row + 16 * d), o[d]);
  }
  template <int D>
  static void Store(const __m512 (&o)[D], __m512 inv, float* out) {
    F32Rows::Store<D>(o, inv, out);
  }
};

template <class Rows>
constexpr float ScaleFactor() {
  if constexpr (Rows::kScaled) return Rows::kScaleFactor;
  return 1.0f;
}

template <int D, class Rows>  // D: head_dim / 16
void AttendHeads(const float* q_row, const int32_t* block_table, int position, int window,
                 int head_begin, int head_end, int group, const void* k_cache,
                 const void* v_cache, const KvCacheShape& shape, float scale,
                 std::vector<float>& scores, float* out_row) {
  constexpr int kHeadDim = D * 16;
  constexpr int64_t kRowBytes = int64_t{kHeadDim} * Rows::kBytes;
  const int heads = head_end - head_begin;
  const int first = window > 0 ? std::max(0, position - window + 1) : 0;
  const int n_ctx = position + 1 - first;
  if (n_ctx <= 0) {
    std::memset(out_row + static_cast<int64_t>(head_begin) * kHeadDim, 0,
                sizeof(float) * heads * kHeadDim);
    return;
  }
  const int n_pad = (n_ctx + kKeys - 1) / kKeys * kKeys;
  // Per call: the (slot, head 0) row index of every visible key, the block table walked
  // once without a division per key.
  thread_local std::vector<int64_t> rows;
  if (rows.size() < static_cast<size_t>(n_ctx)) rows.resize(n_ctx);
  const int block_size = shape.block_size;
  const int kv_heads = shape.num_kv_heads;
  {
    int block = first / block_size, offset = first % block_size;
    for (int p = 0; p < n_ctx; ++p) {
      rows[p] = (static_cast<int64_t>(block_table[block]) * block_size + offset) * kv_heads;
      if (++offset == block_size) {
        offset = 0;
        ++block;
      }
    }
  }
  const char* k_bytes = static_cast<const char*>(k_cache);
  const char* v_bytes = static_cast<const char*>(v_cache);
  const float* k_scales = Rows::kScaled ? KvScales(k_cache, shape) : nullptr;
  const float* v_scales = Rows::kScaled ? KvScales(v_cache, shape) : nullptr;
  auto k_row = [&](int p, int kv_head) { return k_bytes + (rows[p] + kv_head) * kRowBytes; };
  auto v_row = [&](int p, int kv_head) { return v_bytes + (rows[p] + kv_head) * kRowBytes; };

  const size_t needed = static_cast<size_t>(heads) * n_pad;
  if (scores.size() < needed) scores.resize(needed);
  float* s_all = scores.data();

  // Scores, 16 keys at a time for every head of the run: a block's K rows are read from
  // memory by the first head of their GQA group and from L1 by the others. The last
  // block's missing keys score -inf.
  for (int p0 = 0; p0 < n_ctx; p0 += kKeys) {
    const int count = std::min(kKeys, n_ctx - p0);
    const __mmask16 valid = static_cast<__mmask16>((1u << count) - 1);
    // The cache is cold in a forward pass (the weights streamed through since this layer
    // last ran) and a head's rows are a fraction of every cache row: ask for the next
    // block's K rows now rather than waiting on each line.
    const int next_end = std::min(n_ctx, p0 + (1 + kKBlocksAhead) * kKeys);
    for (int p = std::max(p0 + kKBlocksAhead * kKeys, kKeys); p < next_end; ++p) {
      for (int h = head_begin; h < head_end; h += group) {
        const char* k = k_row(p, h / group);
        for (int64_t line = 0; line < kRowBytes; line += 64) _mm_prefetch(k + line, _MM_HINT_T0);
      }
    }
    for (int h = head_begin; h < head_end; ++h) {
      const int kv_head = h / group;
      __m512 qv[D];
      Rows::template PrepareQuery<D>(q_row + static_cast<int64_t>(h) * kHeadDim, qv);
      __m512 part[kKeys];
#pragma GCC unroll 16
      for (int i = 0; i < kKeys; ++i) {
        if (i < count) {
          part[i] = Rows::template Dot<D>(qv, k_row(p0 + i, kv_head));
          if constexpr (Rows::kScaled) {
            part[i] = _mm512_mul_ps(part[i], _mm512_set1_ps(k_scales[rows[p0 + i] + kv_head]));
          }
        } else {
          part[i] = _mm512_setzero_ps();
        }
      }
      const __m512 s = _mm512_mul_ps(Sum16(part), _mm512_set1_ps(scale * ScaleFactor<Rows>()));
      _mm512_storeu_ps(s_all + static_cast<size_t>(h - head_begin) * n_pad + p0,
                       _mm512_mask_blend_ps(valid, _mm512_set1_ps(-__builtin_inff()), s));
    }
  }

  for (int h = head_begin; h < head_end; ++h) {
    const int kv_head = h / group;
    float* s = s_all + static_cast<size_t>(h - head_begin) * n_pad;
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
    if constexpr (Rows::kScaled) {  // The V rows' scales ride on the weights.
      for (int p = 0; p < n_ctx; ++p) s[p] *= v_scales[rows[p] + kv_head] * Rows::kScaleFactor;
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
        const char* a = v_row(p + kVAhead, kv_head);
        const char* b = v_row(p + kVAhead + 1, kv_head);
        for (int64_t line = 0; line < kRowBytes; line += 64) {
          _mm_prefetch(a + line, _MM_HINT_T0);
          _mm_prefetch(b + line, _MM_HINT_T0);
        }
      }
      Rows::template Axpy<D>(_mm512_set1_ps(s[p]), v_row(p, kv_head), o0);
      Rows::template Axpy<D>(_mm512_set1_ps(s[p + 1]), v_row(p + 1, kv_head), o1);
    }
    if (p < n_ctx) Rows::template Axpy<D>(_mm512_set1_ps(s[p]), v_row(p, kv_head), o0);
#pragma GCC unroll 8
    for (int d = 0; d < D; ++d) o0[d] = _mm512_add_ps(o0[d], o1[d]);
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum_v));
    Rows::template Store<D>(o0, inv, out_row + static_cast<int64_t>(h) * kHeadDim);
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

namespace {
template <class Rows>
AttendHeadsFn ForHeadDim(int head_dim) {
  switch (head_dim) {
    case 32: return &attention_avx512::AttendHeads<2, Rows>;
    case 64: return &attention_avx512::AttendHeads<4, Rows>;
    case 128: return &attention_avx512::AttendHeads<8, Rows>;
    default: return nullptr;
  }
}
}  // namespace

AttendHeadsFn Avx512AttendHeads(int head_dim, DType cache_dtype) {
  switch (cache_dtype) {
    case DType::kF32: return ForHeadDim<attention_avx512::F32Rows>(head_dim);
    case DType::kBF16: return ForHeadDim<attention_avx512::Bf16Rows>(head_dim);
    case DType::kF8E4M3: return ForHeadDim<attention_avx512::Fp8Rows>(head_dim);
    default: return nullptr;
  }
}

}  // namespace tessera::kernels::attention_internal

#else  // Not x86-64: the dispatcher never selects this level.

namespace tessera::kernels::attention_internal {
AttendHeadsFn Avx512AttendHeads(int, DType) { return nullptr; }
}  // namespace tessera::kernels::attention_internal

#endif
