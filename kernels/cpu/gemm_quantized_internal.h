#ifndef TESSERA_KERNELS_CPU_GEMM_QUANTIZED_INTERNAL_H_
#define TESSERA_KERNELS_CPU_GEMM_QUANTIZED_INTERNAL_H_

#include <cstdint>

#include "kernels/backend.h"

// Per-ISA row kernels of GemmQuantized (gemm_quantized.h), each in its own file compiled
// for its instruction set only; the bodies share gemm_quantized_rows.inc.
namespace tessera::kernels::gemm_quantized_internal {

// y[i][o] = w.scales[o] * sum_c x[i][c] * value(w[o][c]) for output rows o in
// [row_begin, row_end) and every i < m. `values` is the 256-entry byte -> float table of
// w.dtype, used for the K tail shorter than one vector.
void RowsAvx512(const float* x, int64_t m, const MatrixView& w, const float* values, float* y,
                int64_t row_begin, int64_t row_end);
void RowsAvx2(const float* x, int64_t m, const MatrixView& w, const float* values, float* y,
              int64_t row_begin, int64_t row_end);

}  // namespace tessera::kernels::gemm_quantized_internal

#endif  // TESSERA_KERNELS_CPU_GEMM_QUANTIZED_INTERNAL_H_
