#ifndef TESSERA_KERNELS_CPU_GEMM_QUANTIZED_INTERNAL_H_
#define TESSERA_KERNELS_CPU_GEMM_QUANTIZED_INTERNAL_H_

#include <cstdint>

#include "common/dtype.h"

namespace tessera::kernels::gemm_quantized_internal {

// One weight row `q` [k] with its `scale` against every row of x [m, k]:
// y[i * ldy] = scale * sum_c x[i][c] * value(q[c]).
using RowFn = void (*)(const float* x, int64_t m, const uint8_t* q, int64_t k, float scale,
                       float* y, int64_t ldy);

// The AVX-512F row function for kI8 / kF8E4M3; nullptr where the build has none.
RowFn Avx512RowFn(DType dtype);

template <DType D>
inline float QuantizedValueOf(uint8_t b) {
  if constexpr (D == DType::kI8) {
    return static_cast<float>(static_cast<int8_t>(b));
  } else {
    return Fp8E4M3ToF32(b);
  }
}

}  // namespace tessera::kernels::gemm_quantized_internal

#endif  // TESSERA_KERNELS_CPU_GEMM_QUANTIZED_INTERNAL_H_
