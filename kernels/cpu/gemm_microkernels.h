#ifndef TESSERA_KERNELS_CPU_GEMM_MICROKERNELS_H_
#define TESSERA_KERNELS_CPU_GEMM_MICROKERNELS_H_

#include <cstdint>

// Internal to the GEMM: the register-blocked inner kernels, one set per instruction set.
namespace tessera::kernels::gemm_internal {

inline constexpr int kMaxMr = 4;

// For i < mr, j < nr:
//   y[i * ldy + j] (+)= sum over k in [k0, k0 + kc) of x[i * ldx + k] * w[j * ldw + k]
// where w's elements have the set's dtype; `accumulate` adds to y instead of overwriting.
using MicroKernelFn = void (*)(const float* x, int64_t ldx, const void* w, int64_t ldw,
                               int64_t k0, int64_t kc, float* y, int64_t ldy, bool accumulate);

struct KernelSet {
  int mr = 1;     // Largest number of x rows one call handles.
  int nr = 1;     // Number of W rows of the wide kernels.
  int width = 1;  // Floats per vector register; K chunks are multiples of it.
  // [dtype index (F32, F16, BF16)][rows of x - 1][0: nr rows of W, 1: one row of W].
  MicroKernelFn fn[3][kMaxMr][2] = {};
};

const KernelSet& ScalarKernels();
const KernelSet& Avx2Kernels();
const KernelSet& Avx512Kernels();

}  // namespace tessera::kernels::gemm_internal

#endif  // TESSERA_KERNELS_CPU_GEMM_MICROKERNELS_H_
