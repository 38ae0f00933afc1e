#ifndef TESSERA_KERNELS_CPU_GEMM_INT8_INTERNAL_H_
#define TESSERA_KERNELS_CPU_GEMM_INT8_INTERNAL_H_

#include <cstdint>
#include <cstdlib>
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

// Defines gemm_int8_internal::FN and FN4 (see above) in an ISA file: on x86-64 they call
// NS::Blocks / NS::BlocksInt4 of its target region; elsewhere the dispatcher never
// selects them.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TESSERA_INT8_BLOCKS_EXPORT(NS, FN, FN4)                                              \
  namespace tessera::kernels::gemm_int8_internal {                                          \
  void FN(const Int8Activations& x, int64_t m, const MatrixView& w, float* y, int64_t begin, \
          int64_t end) {                                                                     \
    NS::Blocks(x, m, w, y, begin, end);                                                      \
  }                                                                                          \
  void FN4(const Int8Activations& x, int64_t m, const MatrixView& w, float* y,              \
           int64_t begin, int64_t end) {                                                     \
    NS::BlocksInt4(x, m, w, y, begin, end);                                                  \
  }                                                                                          \
  }
#else
#define TESSERA_INT8_BLOCKS_EXPORT(NS, FN, FN4)                                         \
  namespace tessera::kernels::gemm_int8_internal {                                     \
  void FN(const Int8Activations&, int64_t, const MatrixView&, float*, int64_t, int64_t) { \
    std::abort();                                                                       \
  }                                                                                     \
  void FN4(const Int8Activations&, int64_t, const MatrixView&, float*, int64_t, int64_t) { \
    std::abort();                                                                       \
  }                                                                                     \
  }
#endif

#endif  // TESSERA_KERNELS_CPU_GEMM_INT8_INTERNAL_H_
