#ifndef TESSERA_KERNELS_CPU_GEMM_MICROKERNELS_H_
#define TESSERA_KERNELS_CPU_GEMM_MICROKERNELS_H_

#include <cstdint>

// Internal to the GEMM: the register-blocked inner kernels, one set per instruction set.
namespace tessera::kernels::gemm_internal {

inline constexpr int kMaxMr = 4;

// For i < mr, j < nr:
//   y[i * ldy + j] (+)= sum over k in [k0, k0 + kc) of x[i * ldx + k] * w[j * ldw + k]
// where w's elements have the set's dtype and x's are float32, or BF16 for a set with
// `bf16_activations`; `accumulate` adds to y instead of overwriting.
using MicroKernelFn = void (*)(const void* x, int64_t ldx, const void* w, int64_t ldw,
                               int64_t k0, int64_t kc, float* y, int64_t ldy, bool accumulate);

struct KernelSet {
  int mr = 1;     // Largest number of x rows one call handles.
  int nr = 1;     // Number of W rows of the wide kernels.
  int width = 1;  // Elements per vector step; K chunks are multiples of it.
  // x must be handed over as BF16 rows (RoundRowsToBf16), each zero-padded to a multiple
  // of `width` elements.
  bool bf16_activations = false;
  // Whether the driver splits K into chunks (partial sums stored between them). A set whose
  // horizontal sums are costly relative to a chunk (BF16: 32 elements a step) runs whole K.
  bool chunk_k = true;
  // Whether a product with a single micro-tile of x rows (m <= mr: decode) takes W one row
  // at a time through the one-row kernels: each row is then one sequential stream instead
  // of nr interleaved ones. A set whose sums do not depend on where a W row sits in its
  // micro-tile gets the same bits either way.
  bool stream_rows_alone = false;
  // [dtype index (F32, F16, BF16)][rows of x - 1][0: nr rows of W, 1: one row of W].
  // A null entry: the set has no kernel for that dtype.
  MicroKernelFn fn[3][kMaxMr][2] = {};
};

const KernelSet& ScalarKernels();
const KernelSet& Avx2Kernels();
const KernelSet& Avx512Kernels();
// BF16 weights only: VDPBF16PS on BF16-rounded activations.
const KernelSet& Avx512Bf16Kernels();

// dst[i * ld_dst + j] = BF16(src[i * ld_src + j]) (round to nearest even) for j < cols,
// and 0 for cols <= j < ld_dst. Needs AVX512-BF16 (the set above is the only user).
void RoundRowsToBf16(const float* src, int64_t rows, int64_t cols, int64_t ld_src,
                     uint16_t* dst, int64_t ld_dst);

}  // namespace tessera::kernels::gemm_internal

#endif  // TESSERA_KERNELS_CPU_GEMM_MICROKERNELS_H_
