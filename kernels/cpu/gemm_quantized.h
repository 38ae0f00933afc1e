#ifndef TESSERA_KERNELS_CPU_GEMM_QUANTIZED_H_
#define TESSERA_KERNELS_CPU_GEMM_QUANTIZED_H_

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/thread_pool.h"

namespace tessera::kernels {

// y[m, w.rows] = x[m, w.cols] * w^T for weight-only quantized w (kI8 or kF8E4M3, with
// w.scales set): w[r][c] = scales[r] * value(data[r][c]), or for int8 with group_size g,
// scales[r][c / g] * data[r][c] (portable path only: the CPU backend's own int8 weights
// are kInt8Blocked16, gemm_int8.h). Activations stay float32 and
// accumulation is float32. Each weight row is read once for every row of x, so decode
// streams one byte per weight; the row scale is applied once per output. AVX-512 and AVX2
// widen the bytes in registers (gemm_quantized_internal.h); the scalar path dequantizes
// each row through a 256-entry table (exact for both formats) into an L1-resident float
// row. `level` above what the CPU supports falls back to scalar, as in GemmAtLevel.
void GemmQuantized(SimdLevel level, const float* x, int64_t m, const MatrixView& w, float* y,
                   ThreadPool* pool);

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CPU_GEMM_QUANTIZED_H_
