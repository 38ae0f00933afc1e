#ifndef TESSERA_KERNELS_CPU_GEMM_INT8_INTERNAL_H_
#define TESSERA_KERNELS_CPU_GEMM_INT8_INTERNAL_H_

#include <cstdint>
#include <vector>

#include "kernels/backend.h"

// Per-ISA block kernels of GemmInt8Blocked and GemmInt4Blocked (gemm_int8.h), each ISA
// in its own file compiled for its instruction set only; the bodies share
// gemm_int8_blocks.inc.
namespace tessera::kernels::gemm_int8_internal {

// x rounded to int16 per group of 32 columns, x[t][c] ~= scales[t][c / 32] * q[t][c]:
// pairs [m, padded_cols / 2] holds q[t][2j] in the low and q[t][2j + 1] in the high half
// of element j (zero-padded), the operand VPDPWSSD broadcasts; scales [m, groups]; sums
// [m, groups] the sum of each group's q (int4's zero points multiply it).
struct Int8Activations {
  const int32_t* pairs = nullptr;
  const float* scales = nullptr;
  const int32_t* sums = nullptr;
  int64_t pairs_per_row = 0;
  int64_t groups = 0;
};

// Rounds x [m, k] into `pairs` and `scales` (resized here) and points `out` at them.
void QuantizeActivations(const float* x, int64_t m, int64_t k, std::vector<int32_t>* pairs,
                         std::vector<float>* scales, std::vector<int32_t>* sums,
                         Int8Activations* out);

// y[t][r] for every t < m and the rows of blocks [block_begin, block_end).
using BlocksFn = void (*)(const Int8Activations& x, int64_t m, const MatrixView& w, float* y,
                          int64_t block_begin, int64_t block_end);

void BlocksAvx512Vnni(const Int8Activations& x, int64_t m, const MatrixView& w, float* y,
                      int64_t block_begin, int64_t block_end);
void BlocksAvx512(const Int8Activations& x, int64_t m, const MatrixView& w, float* y,
                  int64_t block_begin, int64_t block_end);
void BlocksAvx2(const Int8Activations& x, int64_t m, const MatrixView& w, float* y,
                int64_t block_begin, int64_t block_end);
void BlocksScalar(const Int8Activations& x, int64_t m, const MatrixView& w, float* y,
                  int64_t block_begin, int64_t block_end);

// The same for kU4Blocked16 weights.
void BlocksInt4Avx512Vnni(const Int8Activations& x, int64_t m, const MatrixView& w, float* y,
                          int64_t block_begin, int64_t block_end);
void BlocksInt4Avx512(const Int8Activations& x, int64_t m, const MatrixView& w, float* y,
                      int64_t block_begin, int64_t block_end);
void BlocksInt4Avx2(const Int8Activations& x, int64_t m, const MatrixView& w, float* y,
                    int64_t block_begin, int64_t block_end);
void BlocksInt4Scalar(const Int8Activations& x, int64_t m, const MatrixView& w, float* y,
                      int64_t block_begin, int64_t block_end);

// Which AVX-512 kernels this CPU can run (AVX512-BW; VNNI for BlocksAvx512Vnni).
bool CpuHasAvx512Bw();
bool CpuHasAvx512Vnni();

}  // namespace tessera::kernels::gemm_int8_internal

#endif  // TESSERA_KERNELS_CPU_GEMM_INT8_INTERNAL_H_
