#ifndef TESSERA_KERNELS_CPU_GEMM_INT4_H_
#define TESSERA_KERNELS_CPU_GEMM_INT4_H_

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/thread_pool.h"

namespace tessera::kernels {

// y[m, w.rows] = x[m, w.cols] * w^T for group-wise 4-bit weights (w.dtype == kU4, see
// MatrixView): each task dequantizes a panel of weight rows to float once
// (s * (q - z), one rounding) and runs every row of x against it, so decode streams the
// packed bytes once and prefill amortises the unpacking over its rows. Parallel over
// panels of output rows on `pool` (may be null). `level` above what the CPU supports runs
// the scalar path.
void GemmInt4(SimdLevel level, const float* x, int64_t m, const MatrixView& w, float* y,
              ThreadPool* pool);

namespace int4_internal {

// One code path's building blocks.
struct Int4Kernels {
  // dst[c] = scales[c / group] * (q(c) - zeros[c / group]) for c < cols; q(c) is nibble
  // c of `packed` (low nibble first). `group` divides cols and is even.
  void (*dequant_row)(const uint8_t* packed, const float* scales, const float* zeros,
                      int64_t cols, int group, float* dst);
  // out[j] = sum_c x[c] * w[j * ldw + c] for c < k and j < nw, 1 <= nw <= 4.
  void (*dot_rows)(const float* x, const float* w, int64_t ldw, int nw, int64_t k, float* out);
  // Fused decode GEMV, or null where the level has none: y[i * ldy + r] for i < m
  // (m <= kMaxGemvRows) and r in [row_begin, row_end), unpacking each weight row once in
  // registers. `xp` is x [m, k] with every 32 columns reordered to the 16 even ones then
  // the 16 odd ones (PermuteForGemv), so a packed byte's low and high nibbles meet their
  // activations without shuffles. Needs group % 32 == 0.
  void (*gemv)(const float* xp, int64_t m, int64_t k, const uint8_t* packed,
               const float* scales, const float* zeros, int group, int64_t row_begin,
               int64_t row_end, float* y, int64_t ldy);
};

constexpr int64_t kMaxGemvRows = 4;

const Int4Kernels& ScalarInt4Kernels();
const Int4Kernels& Avx2Int4Kernels();
const Int4Kernels& Avx512Int4Kernels();

}  // namespace int4_internal
}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CPU_GEMM_INT4_H_
