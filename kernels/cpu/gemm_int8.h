#ifndef TESSERA_KERNELS_CPU_GEMM_INT8_H_
#define TESSERA_KERNELS_CPU_GEMM_INT8_H_

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/thread_pool.h"

namespace tessera::kernels {

// y[m, w.rows] = x[m, w.cols] * w^T for int8 weights in WeightLayout::kInt8Blocked16.
//
// Each row of x is rounded to int16 per group of 32 columns (scale = max|x| / 32767 over
// the group, so every value keeps at least the relative precision of BF16 and a large
// activation elsewhere in the row costs the others nothing); within a group the products
// are exact int32 sums, and each group's sum enters the float32 accumulator once, times
// the weight scale and the activation scale. Decode thus costs two instructions per 32
// weights (a widening load and VPDPWSSD), as BF16's VDPBF16PS does, for half the bytes.
// Every SIMD level and tiling computes the same float operations in the same order, so
// all levels give bit-identical results.
//
// `level` above what the CPU supports falls back to scalar, as in GemmAtLevel.
void GemmInt8Blocked(SimdLevel level, const float* x, int64_t m, const MatrixView& w, float* y,
                     ThreadPool* pool);

// The same for group-wise 4-bit weights (GPTQ/AWQ) in WeightLayout::kU4Blocked16:
// w = s (q - z) per weight group, and over each 32-column activation group
// sum s (q - z) xs x = s xs (sum q x - z sum x), the integer sums exact as above. The weight
// group (w.group_size) must be the whole row or a multiple of 32 (Int4Blockable).
void GemmInt4Blocked(SimdLevel level, const float* x, int64_t m, const MatrixView& w, float* y,
                     ThreadPool* pool);

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CPU_GEMM_INT8_H_
