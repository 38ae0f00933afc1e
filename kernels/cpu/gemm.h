#ifndef TESSERA_KERNELS_CPU_GEMM_H_
#define TESSERA_KERNELS_CPU_GEMM_H_

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/thread_pool.h"

namespace tessera::kernels {

// Multiply-adds below which waking the pool costs more than it saves (every GEMM path).
constexpr int64_t kMinParallelGemmWork = int64_t{1} << 15;

// y[m, w.rows] = x[m, w.cols] * w^T with float32 accumulation; w may be F32, BF16 or F16
// and is converted in registers (activations are never rounded); group-wise 4-bit (kU4)
// weights go to GemmInt4 (gemm_int4.h). Row-major, densely packed
// x and y; y must not overlap x. Parallel over output columns (and row blocks of x) on
// `pool`, which may be null to run on the calling thread only. Uses the ActiveSimdLevel()
// code path.
void Gemm(const float* x, int64_t m, const MatrixView& w, float* y, ThreadPool* pool);

// The same with an explicit code path; `level` must be supported by this CPU
// (see DetectSimdLevel()), else the scalar path runs.
void GemmAtLevel(SimdLevel level, const float* x, int64_t m, const MatrixView& w, float* y,
                 ThreadPool* pool);

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CPU_GEMM_H_
