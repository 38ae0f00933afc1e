#ifndef TESSERA_KERNELS_CPU_VEC_OPS_H_
#define TESSERA_KERNELS_CPU_VEC_OPS_H_

#include "kernels/cpu/simd.h"

namespace tessera::kernels {

// Small vector primitives for the kernels whose inner loops are short rows (attention
// over head_dim), one implementation per SimdLevel.
struct VecOps {
  // sum of a[i] * b[i], i < n.
  float (*dot)(const float* a, const float* b, int n);
  // y[i] += alpha * x[i], i < n.
  void (*axpy)(float alpha, const float* x, float* y, int n);
};

// The primitives for `level`; levels this CPU does not support give the scalar ones.
const VecOps& GetVecOps(SimdLevel level);

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CPU_VEC_OPS_H_
