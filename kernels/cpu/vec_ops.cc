#include "kernels/cpu/vec_ops.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// GCC 12's AVX-512 headers build vectors from _mm512_undefined_*(), which -Wuninitialized
// reports once inlined; the pragma has to precede the header to cover those lines.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define TESSERA_HAVE_X86_SIMD 1
#endif

namespace tessera::kernels {
namespace {

float DotScalar(const float* a, const float* b, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

void AxpyScalar(float alpha, const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += alpha * x[i];
}

#ifdef TESSERA_HAVE_X86_SIMD

__attribute__((target("avx2,fma"))) float DotAvx2(const float* a, const float* b, int n) {
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  }
  const __m256 acc = _mm256_add_ps(acc0, acc1);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  float sum = _mm_cvtss_f32(s);
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

__attribute__((target("avx2,fma"))) void AxpyAvx2(float alpha, const float* x, float* y,
                                                   int n) {
  const __m256 va = _mm256_set1_ps(alpha);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += alpha * x[i];
}

__attribute__((target("avx512f"))) float DotAvx512(const float* a, const float* b, int n) {
  __m512 acc0 = _mm512_setzero_ps();
  __m512 acc1 = _mm512_setzero_ps();
  int i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  if (i < n) {
    // The rest, fewer than 32, in at most two masked steps.
    for (; i < n; i += 16) {
      const int left = n - i;
      const __mmask16 mask = left >= 16 ? static_cast<__mmask16>(0xffff)
                                        : static_cast<__mmask16>((1u << left) - 1);
      acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, a + i), _mm512_maskz_loadu_ps(mask, b + i),
                             acc0);
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

__attribute__((target("avx512f"))) void AxpyAvx512(float alpha, const float* x, float* y,
                                                    int n) {
  const __m512 va = _mm512_set1_ps(alpha);
  for (int i = 0; i < n; i += 16) {
    const int left = n - i;
    const __mmask16 mask =
        left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
    const __m512 r =
        _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(mask, x + i), _mm512_maskz_loadu_ps(mask, y + i));
    _mm512_mask_storeu_ps(y + i, mask, r);
  }
}

#endif  // TESSERA_HAVE_X86_SIMD

}  // namespace

const VecOps& GetVecOps(SimdLevel level) {
  static const VecOps kScalar{&DotScalar, &AxpyScalar};
#ifdef TESSERA_HAVE_X86_SIMD
  static const VecOps kAvx2{&DotAvx2, &AxpyAvx2};
  static const VecOps kAvx512{&DotAvx512, &AxpyAvx512};
  if (level > DetectSimdLevel()) return kScalar;
  switch (level) {
    case SimdLevel::kAvx512Bf16:
    case SimdLevel::kAvx512: return kAvx512;
    case SimdLevel::kAvx2: return kAvx2;
    case SimdLevel::kScalar: break;
  }
#endif
  return kScalar;
}

}  // namespace tessera::kernels
