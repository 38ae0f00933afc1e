#ifndef TESSERA_KERNELS_CPU_GEMM_QUANTIZED_H_
#define TESSERA_KERNELS_CPU_GEMM_QUANTIZED_H_

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/thread_pool.h"

namespace tessera::kernels {

// y[m, w.rows] = x[m, w.cols] * w^T for weight-only quantized w (kI8 or kF8E4M3, with
// w.scales set): w[r][c] = scales[r] * value(data[r][c]). Activations stay float32 and
// accumulation is float32. Each weight row is dequantized once (through a 256-entry table,
// exact for both formats) into an L1-resident float row and reused by every row of x, so
// decode streams the weight bytes once; the row scale is applied once per output.
void GemmQuantized(const float* x, int64_t m, const MatrixView& w, float* y,
                   ThreadPool* pool);

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CPU_GEMM_QUANTIZED_H_
