#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/dtype.h"
#include "kernels/cpu/gemm_int4.h"
#include "kernels/cpu/gemm_int8.h"
#include "kernels/cpu/gemm_microkernels.h"
#include "kernels/cpu/gemm_quantized.h"

namespace tessera::kernels {

// The portable path: the shared micro-kernel with one-float "vectors".
namespace gemm_scalar {

struct V {
  using Reg = float;
  static constexpr int kWidth = 1;
  static constexpr int kMr = 4;
  static constexpr int kNr = 4;

  static inline Reg Zero() { return 0.0f; }
  static inline Reg LoadX(const float* p) { return *p; }
  template <DType D>
  static inline Reg LoadW(const void* w, int64_t index);
  static inline Reg Fma(Reg a, Reg b, Reg acc) { return a * b + acc; }
  static inline float Sum(Reg r) { return r; }
};

#include "kernels/cpu/gemm_microkernel.inc"

template <DType D>
inline V::Reg V::LoadW(const void* w, int64_t index) {
  return LoadWScalar<D>(w, index);
}

}  // namespace gemm_scalar

namespace gemm_internal {
const KernelSet& ScalarKernels() {
  static const KernelSet set = gemm_scalar::MakeKernelSet();
  return set;
}
}  // namespace gemm_internal

namespace {

using gemm_internal::KernelSet;

// Blocking. A tile is kMBlock rows of x against kNBlockTiles micro-tiles of W rows; tiles
// are the unit of parallel work. Inside a tile, K goes in chunks of kKChunk so the W rows
// of a micro-tile stay in L1 while every row block of x passes over them, and the tile's x
// rows stay in L2. Decode (m <= kMBlock) reads each weight row from memory once for all
// rows of x.
constexpr int64_t kMBlock = 64;
constexpr int64_t kNBlockTiles = 4;
// Sets that run whole K (no chunks) loop over the tile's W micro-tiles inside each row
// micro-tile of x, so x's rows stay in L1 while W streams from L2: wider tiles reuse them
// longer (measured best at 8 for the BF16 set on Zen 4).
constexpr int64_t kNBlockTilesWholeK = 8;
constexpr int64_t kKChunk = 1024;

int DTypeIndex(DType t) {
  switch (t) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kBF16: return 2;
    case DType::kI8:
    case DType::kF8E4M3:
    case DType::kI32:
    case DType::kU4: break;  // Quantized weights have kernels of their own.
  }
  return 0;
}

const KernelSet& KernelsFor(SimdLevel level, DType dtype) {
  if (level > DetectSimdLevel()) level = SimdLevel::kScalar;
  switch (level) {
    case SimdLevel::kAvx512Bf16:
      if (dtype == DType::kBF16) return gemm_internal::Avx512Bf16Kernels();
      return gemm_internal::Avx512Kernels();
    case SimdLevel::kAvx512: return gemm_internal::Avx512Kernels();
    case SimdLevel::kAvx2: return gemm_internal::Avx2Kernels();
    case SimdLevel::kScalar: break;
  }
  return gemm_internal::ScalarKernels();
}

}  // namespace

void GemmAtLevel(SimdLevel level, const float* x, int64_t m, const MatrixView& w, float* y,
                 ThreadPool* pool) {
  if (w.dtype == DType::kU4) {  // Group-wise 4-bit weights (GPTQ/AWQ).
    if (w.layout == WeightLayout::kU4Blocked16) {
      GemmInt4Blocked(level, x, m, w, y, pool);
    } else {
      GemmInt4(level, x, m, w, y, pool);
    }
    return;
  }
  const int64_t n = w.rows;
  const int64_t k = w.cols;
  if (m <= 0 || n <= 0) return;
  if (w.dtype == DType::kI8 && w.layout == WeightLayout::kInt8Blocked16) {
    GemmInt8Blocked(level, x, m, w, y, pool);
    return;
  }
  if (w.dtype == DType::kI8 || w.dtype == DType::kF8E4M3) {
    GemmQuantized(level, x, m, w, y, pool);
    return;
  }
  if (k <= 0) {
    std::memset(y, 0, static_cast<size_t>(m * n) * sizeof(float));
    return;
  }
  const KernelSet& ks = KernelsFor(level, w.dtype);
  const int d = DTypeIndex(w.dtype);
  const size_t elem = DTypeSize(w.dtype);
  const auto* w_bytes = static_cast<const char*>(w.data);

  // The kernels' view of x: the float rows as given, or their BF16 rounding padded to a
  // whole vector step (kept per calling thread, so steady-state steps allocate nothing).
  const void* x_rows = x;
  int64_t ldx = k;
  size_t x_elem = sizeof(float);
  if (ks.bf16_activations) {
    thread_local std::vector<uint16_t> rounded;
    ldx = (k + ks.width - 1) / ks.width * ks.width;
    if (rounded.size() < static_cast<size_t>(m * ldx)) rounded.resize(m * ldx);
    // A lambda naming `rounded` would reach each pool thread's own copy: pass the pointer.
    uint16_t* const rounded_data = rounded.data();
    auto round_rows = [&](int64_t begin, int64_t end) {
      gemm_internal::RoundRowsToBf16(x + begin * k, end - begin, k, k,
                                     rounded_data + begin * ldx, ldx);
    };
    if (pool == nullptr || m * k < kMinParallelGemmWork) {
      round_rows(0, m);
    } else {
      pool->ParallelFor(m, 1, round_rows);
    }
    x_rows = rounded_data;
    x_elem = sizeof(uint16_t);
  }
  const auto* x_bytes = static_cast<const char*>(x_rows);

  // With a single micro-tile of rows, nothing would reuse a K chunk: skip chunking and its
  // partial-sum stores.
  const int64_t k_chunk = m <= ks.mr || !ks.chunk_k ? k : kKChunk;
  const int64_t m_block = std::min(m, kMBlock);
  const int64_t m_tiles = (m + m_block - 1) / m_block;
  const int64_t n_block = (ks.chunk_k ? kNBlockTiles : kNBlockTilesWholeK) * ks.nr;
  const int64_t n_tiles = (n + n_block - 1) / n_block;

  // Chunked sets keep a W micro-tile in L1 while x's rows pass over it; whole-K sets the
  // other way round (see kNBlockTilesWholeK).
  const bool x_panel_outer = !ks.chunk_k;
  const int64_t nr = ks.stream_rows_alone && m <= ks.mr ? 1 : ks.nr;
  const int64_t w_row_bytes = k * static_cast<int64_t>(elem);
  auto run_tiles = [&](int64_t tile_begin, int64_t tile_end) {
    for (int64_t tile = tile_begin; tile < tile_end; ++tile) {
      // Row block outermost, so threads running at once share the same rows of x.
      const int64_t m_begin = (tile / n_tiles) * m_block;
      const int64_t m_end = std::min(m, m_begin + m_block);
      const int64_t n_begin = (tile % n_tiles) * n_block;
      const int64_t n_end = std::min(n, n_begin + n_block);
      // Where the tile's W rows serve several row micro-tiles of x, the first of them is
      // bound by reading those rows from memory while the others find them in L2. So the
      // next tile's rows (contiguous: W is row-major) are prefetched into L2 a slice per
      // micro-tile call. Measured on Zen 4, 2 threads, BF16: the 32-row lm_head of Qwen3
      // 338 -> 363 GFLOP/s, a 1024-row prefill GEMM 366 -> 392, a prefill's experts
      // 297 -> 320. A single pass over the rows (decode) streams better without it.
      const char* prefetch = nullptr;
      const char* prefetch_end = nullptr;
      int64_t prefetch_step = 0;
      if (tile + 1 < tile_end && m_end - m_begin > ks.mr) {
        const int64_t next_n = ((tile + 1) % n_tiles) * n_block;
        prefetch = w_bytes + next_n * w_row_bytes;
        prefetch_end = w_bytes + std::min(n, next_n + n_block) * w_row_bytes;
        const int64_t calls = (m_end - m_begin + ks.mr - 1) / ks.mr * ((n_end - n_begin + nr - 1) / nr) *
                              ((k + k_chunk - 1) / k_chunk);
        prefetch_step = ((prefetch_end - prefetch) / calls + 63) / 64 * 64;
      }
      for (int64_t k0 = 0; k0 < k; k0 += k_chunk) {
        const int64_t kc = std::min(k_chunk, k - k0);
        const bool accumulate = k0 > 0;
        auto micro_tile = [&](int64_t m0, int mr, int64_t n0, bool wide) {
          for (const char* end = std::min(prefetch_end, prefetch + prefetch_step); prefetch < end;
               prefetch += 64) {
            __builtin_prefetch(prefetch, 0, /*locality=L2*/ 2);
          }
          ks.fn[d][mr - 1][wide ? 0 : 1](x_bytes + static_cast<size_t>(m0 * ldx) * x_elem, ldx,
                                         w_bytes + static_cast<size_t>(n0 * k) * elem, k, k0,
                                         kc, y + m0 * n + n0, n, accumulate);
        };
        if (x_panel_outer) {
          for (int64_t m0 = m_begin; m0 < m_end;) {
            const int mr = static_cast<int>(std::min<int64_t>(ks.mr, m_end - m0));
            for (int64_t n0 = n_begin; n0 < n_end;) {
              const bool wide = nr > 1 && n_end - n0 >= nr;
              micro_tile(m0, mr, n0, wide);
              n0 += wide ? nr : 1;
            }
            m0 += mr;
          }
        } else {
          for (int64_t n0 = n_begin; n0 < n_end;) {
            const bool wide = nr > 1 && n_end - n0 >= nr;
            for (int64_t m0 = m_begin; m0 < m_end;) {
              const int mr = static_cast<int>(std::min<int64_t>(ks.mr, m_end - m0));
              micro_tile(m0, mr, n0, wide);
              m0 += mr;
            }
            n0 += wide ? nr : 1;
          }
        }
      }
    }
  };

  const int64_t tiles = m_tiles * n_tiles;
  if (pool == nullptr || pool->num_threads() == 1 || tiles == 1 ||
      m * n * k < kMinParallelGemmWork) {
    run_tiles(0, tiles);
    return;
  }
  pool->ParallelFor(tiles, 1, run_tiles);
}

void Gemm(const float* x, int64_t m, const MatrixView& w, float* y, ThreadPool* pool) {
  GemmAtLevel(ActiveSimdLevel(), x, m, w, y, pool);
}

}  // namespace tessera::kernels
