// Fused weight-only GEMV for decode-sized batches: int8 / FP8 E4M3 weights with a scale per
// row, and group-wise 4-bit (kU4) weights with a scale and zero per (row, group). The
// quantized bytes are read once, straight from the weight matrix, with 128-bit loads;
// nothing is widened into scratch, so a step moves 1 (int8/FP8) or ~0.56 (int4, group 128)
// bytes per weight instead of the 5 that dequantize-then-BF16-GEMV costs.
//
// Layout of the work: `splits` warps (1, 2 or 4) share kRowsPerWarp consecutive output
// rows; lane l of split s reads the 16-byte chunks 32 s + l, + 32 splits, ... of each of
// them (a warp-wide load is 512 contiguous bytes per row), decodes them in registers and
// multiplies them with the matching activations, which stay float32 and come through L1
// (shared by every warp of the SM). Splitting K over warps keeps enough loads in flight
// when a matrix has few rows (Llama-3.2-1B's o and down, tensor-parallel slices), where a
// warp per row group would leave SMs nearly idle. FP32 accumulation; the row scale is
// applied once to the reduced sum, the int4 group scale once per 32-column chunk (a chunk
// never straddles a group on this path).
//
// Why at most four activation rows per pass: per weight the kernel does the decode plus m
// FMAs, and reads m activation floats from L1 for every kRowsPerWarp weights. On H100/H200
// (about 7 FP32 instructions and 7 L1 bytes per HBM byte per SM) that stays under the
// weight-byte time up to m ~ 4; larger decode batches (5..8) take two passes, which reads
// the weights twice but still moves 2-4x fewer bytes than widening them to BF16.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <string>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/quantized_value.h"

namespace tessera::kernels::gpu {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerWarp = 4;
constexpr int kPassRows = 4;  // Activation rows per kernel launch (see above).

// 2^23: the float whose bits are 0x4B000000 | n (n < 2^23) is exactly 2^23 + n, so an
// integer code becomes a float with one logic op and one subtraction (no I2F, which runs at
// a quarter of the FMA rate).
constexpr float kMagic = 8388608.0f;
constexpr uint32_t kMagicBits = 0x4B000000u;

// ---- Row-scaled bytes: four codes per 32-bit word, column order = byte order.
template <DType D>
struct ByteCodec;

template <>
struct ByteCodec<DType::kI8> {
  __device__ __forceinline__ static void Decode(uint32_t word, float* f) {
    const uint32_t biased = word ^ 0x80808080u;  // Each byte b + 128, now unsigned.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // Bytes (low first): code i, 0, 0, 0x4B.
      f[i] = __uint_as_float(__byte_perm(biased, kMagicBits, 0x7440u | i)) - (kMagic + 128.0f);
    }
  }
  __device__ __forceinline__ static float Value(uint8_t b) { return quantized::Int8Value(b); }
};

template <>
struct ByteCodec<DType::kF8E4M3> {
  // Every E4M3 value (NaN included) is exact in FP16; sm_89+ converts a pair per instruction.
  __device__ __forceinline__ static void Decode(uint32_t word, float* f) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(
          static_cast<__nv_fp8x2_storage_t>(word >> (16 * j)), __NV_E4M3);
      const float2 v = __half22float2(__half2(raw));
      f[2 * j] = v.x;
      f[2 * j + 1] = v.y;
    }
  }
  __device__ __forceinline__ static float Value(uint8_t b) { return quantized::Fp8E4M3Value(b); }
};

__device__ __forceinline__ uint32_t Word(const uint4& v, int t) {
  return t == 0 ? v.x : t == 1 ? v.y : t == 2 ? v.z : v.w;
}

// Which rows and which K items (chunks or columns) a warp takes: `splits` consecutive warps
// of the block share one group of kRowsPerWarp rows.
struct WarpWork {
  int64_t row0;   // First row of the group; >= n for warps past the end.
  int64_t first;  // First item of this lane; items first, first + stride, ...
  int64_t stride;
  int split;      // Index of this warp within its group.
};

__device__ __forceinline__ WarpWork AssignWork(int splits) {
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  WarpWork work;
  work.split = warp % splits;
  work.row0 = (static_cast<int64_t>(blockIdx.x) * (kWarps / splits) + warp / splits) *
              kRowsPerWarp;
  work.first = static_cast<int64_t>(work.split) * 32 + lane;
  work.stride = static_cast<int64_t>(splits) * 32;
  return work;
}

// Sums acc over the lanes and the `splits` warps of each group, then the first warp of the
// group stores y[mm * n + row0 + r] = scale(row) * sum for rows < n. Every thread of the
// block must call it (it synchronises).
template <int M, typename Scale>
__device__ __forceinline__ void ReduceAndStore(const float (&acc)[M][kRowsPerWarp],
                                               const WarpWork& work, int splits, int64_t n,
                                               Scale scale, void* __restrict__ y, bool y_bf16) {
  __shared__ float partial[kWarps][M][kRowsPerWarp];
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int mm = 0; mm < M; ++mm) {
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const float total = WarpSum(acc[mm][r]);
      if (lane == 0) partial[warp][mm][r] = total;
    }
  }
  __syncthreads();
  static_assert(M * kRowsPerWarp <= 32, "one lane per (activation row, weight row)");
  if (work.split != 0 || lane >= M * kRowsPerWarp) return;
  const int mm = lane / kRowsPerWarp;
  const int r = lane % kRowsPerWarp;
  if (work.row0 + r >= n) return;
  float total = 0.0f;
  for (int s = 0; s < splits; ++s) total += partial[warp + s][mm][r];
  StoreAct(y, mm * n + work.row0 + r, scale(work.row0 + r) * total, y_bf16);
}

// y[mm * n + r] = sum_c x[mm * k + c] * scales[r][c / group] * value(w[r * k + c]) for
// mm < M; group = k for one scale per row (applied once to the sum), else (int8 made at
// load time: 32) each 16-byte chunk or column is scaled as it is decoded.
// kVector: k % 16 == 0, group % 16 == 0 and w, x 16-byte aligned; items are 16-byte
// chunks, else columns.
template <DType D, typename TX, int M, bool kVector>
__global__ void __launch_bounds__(kThreads)
    RowScaledGemvKernel(const TX* __restrict__ x,          // [M, k] activations
                        const uint8_t* __restrict__ w,     // [n, k]
                        const float* __restrict__ scales,  // [n, ceil(k / group)]
                        int64_t n, int64_t k, int64_t group, int splits,
                        void* __restrict__ y, bool y_bf16) {  // [M, n] F32 or BF16
  const WarpWork work = AssignWork(splits);
  const bool grouped = group < k;
  const int64_t groups = (k + group - 1) / group;
  // Rows past the end re-read the last row (cheap, in L1) and are never stored; warps past
  // the last group skip the loop but still join the block's reduction.
  const uint8_t* rows[kRowsPerWarp];
  const float* row_scales[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t row = min(work.row0 + r, n - 1);
    rows[r] = w + row * k;
    row_scales[r] = scales + row * groups;
  }
  const int64_t end = work.row0 < n ? (kVector ? k / 16 : k) : 0;

  float acc[M][kRowsPerWarp];
#pragma unroll
  for (int mm = 0; mm < M; ++mm) {
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) acc[mm][r] = 0.0f;
  }

  if constexpr (kVector) {
#pragma unroll 2
    for (int64_t c = work.first; c < end; c += work.stride) {
      uint4 raw[kRowsPerWarp];
      float chunk_scale[kRowsPerWarp];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        raw[r] = __ldg(reinterpret_cast<const uint4*>(rows[r]) + c);
        chunk_scale[r] = grouped ? __ldg(row_scales[r] + c * 16 / group) : 1.0f;
      }
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        float wf[kRowsPerWarp][4];
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
          ByteCodec<D>::Decode(Word(raw[r], t), wf[r]);
#pragma unroll
          for (int i = 0; i < 4; ++i) wf[r][i] *= chunk_scale[r];
        }
#pragma unroll
        for (int mm = 0; mm < M; ++mm) {
          const float4 xv = LoadAct4(x, mm * k + 16 * c + 4 * t);
#pragma unroll
          for (int r = 0; r < kRowsPerWarp; ++r) {
            float a = acc[mm][r];
            a = fmaf(wf[r][0], xv.x, a);
            a = fmaf(wf[r][1], xv.y, a);
            a = fmaf(wf[r][2], xv.z, a);
            a = fmaf(wf[r][3], xv.w, a);
            acc[mm][r] = a;
          }
        }
      }
    }
  } else {
    for (int64_t kk = work.first; kk < end; kk += work.stride) {
      float wf[kRowsPerWarp];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        wf[r] = ByteCodec<D>::Value(rows[r][kk]);
        if (grouped) wf[r] *= row_scales[r][kk / group];
      }
#pragma unroll
      for (int mm = 0; mm < M; ++mm) {
        const float xv = ToFloat(x[mm * k + kk]);
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) acc[mm][r] = fmaf(wf[r], xv, acc[mm][r]);
      }
    }
  }
  ReduceAndStore<M>(acc, work, splits, n,
                    [scales, grouped](int64_t row) { return grouped ? 1.0f : scales[row]; }, y,
                    y_bf16);
}

// One 16-byte chunk (32 columns, one group) of kRowsPerWarp int4 rows against M activation
// rows: part[mm][r] += sum over the chunk of (q - z[r]) * x. kExactZero: every zm[r] is
// exactly 2^23 + z[r] (integer zeros, as GPTQ and AWQ store), so (2^23 + q) - zm is q - z
// with a single exact subtraction; otherwise two, the second rounding like the CPU's q - z.
template <int M, bool kExactZero, typename TX>
__device__ __forceinline__ void Int4Chunk(const uint4 (&raw)[kRowsPerWarp],
                                          const float (&z)[kRowsPerWarp],
                                          const float (&zm)[kRowsPerWarp],
                                          const TX* __restrict__ x, int64_t k, int64_t col0,
                                          float (&part)[M][kRowsPerWarp]) {
#pragma unroll
  for (int t = 0; t < 4; ++t) {  // Word t: columns col0 + 8t .. + 7, low nibble first.
    float wf[kRowsPerWarp][8];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const uint32_t word = Word(raw[r], t);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float biased = __uint_as_float(((word >> (4 * i)) & 0xfu) | kMagicBits);
        wf[r][i] = kExactZero ? biased - zm[r] : (biased - kMagic) - z[r];
      }
    }
#pragma unroll
    for (int mm = 0; mm < M; ++mm) {
      float xv[8];
      LoadAct8(x, mm * k + col0 + 8 * t, xv);
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        float p = part[mm][r];
#pragma unroll
        for (int i = 0; i < 8; ++i) p = fmaf(wf[r][i], xv[i], p);
        part[mm][r] = p;
      }
    }
  }
}

// y[mm * n + r] = sum_c x[mm * k + c] * s[r][g] * (q[r][c] - z[r][g]), g = c / group.
// kVector: group % 32 == 0 and w, x 16-byte aligned; items are 16-byte chunks (32 columns),
// else columns.
template <typename TX, int M, bool kVector>
__global__ void __launch_bounds__(kThreads)
    Int4GemvKernel(const TX* __restrict__ x,          // [M, k] activations
                   const uint8_t* __restrict__ w,     // [n, k / 2], low nibble = even column
                   const float* __restrict__ scales,  // [n, k / group]
                   const float* __restrict__ zeros,   // [n, k / group]
                   int64_t n, int64_t k, int group, int splits,
                   void* __restrict__ y, bool y_bf16) {  // [M, n] F32 or BF16
  const WarpWork work = AssignWork(splits);
  const int64_t groups = k / group;
  const int64_t row_bytes = k / 2;
  int64_t rows[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) rows[r] = min(work.row0 + r, n - 1);
  const int64_t end = work.row0 < n ? (kVector ? k / 32 : k) : 0;

  float acc[M][kRowsPerWarp];
#pragma unroll
  for (int mm = 0; mm < M; ++mm) {
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) acc[mm][r] = 0.0f;
  }

  if constexpr (kVector) {
    for (int64_t c = work.first; c < end; c += work.stride) {
      const int64_t g = c * 32 / group;
      uint4 raw[kRowsPerWarp];
      float s[kRowsPerWarp], z[kRowsPerWarp], zm[kRowsPerWarp];
      bool exact = true;
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        raw[r] = __ldg(reinterpret_cast<const uint4*>(w + rows[r] * row_bytes) + c);
        s[r] = __ldg(scales + rows[r] * groups + g);
        z[r] = __ldg(zeros + rows[r] * groups + g);
        zm[r] = kMagic + z[r];
        exact = exact && zm[r] - kMagic == z[r];
      }
      float part[M][kRowsPerWarp];
#pragma unroll
      for (int mm = 0; mm < M; ++mm) {
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) part[mm][r] = 0.0f;
      }
      if (exact) {
        Int4Chunk<M, true>(raw, z, zm, x, k, c * 32, part);
      } else {
        Int4Chunk<M, false>(raw, z, zm, x, k, c * 32, part);
      }
#pragma unroll
      for (int mm = 0; mm < M; ++mm) {
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) acc[mm][r] = fmaf(s[r], part[mm][r], acc[mm][r]);
      }
    }
  } else {
    // Any even group (odd widths, groups not a multiple of 32) or unaligned pointers: one
    // nibble per lane per row, the CPU's s * (q - z) per weight. Slow, but correct.
    for (int64_t kk = work.first; kk < end; kk += work.stride) {
      const int64_t g = kk / group;
      float wf[kRowsPerWarp];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const uint8_t b = w[rows[r] * row_bytes + kk / 2];
        const float q = static_cast<float>((b >> (4 * (kk & 1))) & 0xf);
        wf[r] = scales[rows[r] * groups + g] * (q - zeros[rows[r] * groups + g]);
      }
#pragma unroll
      for (int mm = 0; mm < M; ++mm) {
        const float xv = ToFloat(x[mm * k + kk]);
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) acc[mm][r] = fmaf(wf[r], xv, acc[mm][r]);
      }
    }
  }
  ReduceAndStore<M>(acc, work, splits, n, [](int64_t) { return 1.0f; }, y, y_bf16);
}

// Warps sharing a row group: enough for one 16-byte item per lane (fewer leave lanes idle),
// at most the block's four; a power of two, so groups never straddle blocks.
int SplitsFor(int64_t items) {
  if (items >= 4 * 32) return 4;
  if (items >= 2 * 32) return 2;
  return 1;
}

// One pass of 1..kPassRows activation rows.
template <typename TX, int M>
void LaunchPass(const TX* x, const MatrixView& w, int group, bool vector, void* y, bool y_bf16,
                cudaStream_t stream) {
  // Scalar paths count 16 columns as an item, like a 16-byte chunk of int8.
  const int64_t items = vector && w.dtype == DType::kU4 ? w.cols / 32 : w.cols / 16;
  const int splits = SplitsFor(items);
  const int64_t rows_per_block = static_cast<int64_t>(kWarps / splits) * kRowsPerWarp;
  const unsigned grid = static_cast<unsigned>((w.rows + rows_per_block - 1) / rows_per_block);
  const auto* bytes = static_cast<const uint8_t*>(w.data);
  switch (w.dtype) {
    case DType::kI8:
      if (vector) {
        RowScaledGemvKernel<DType::kI8, TX, M, true>
            <<<grid, kThreads, 0, stream>>>(x, bytes, w.scales, w.rows, w.cols, group, splits, y,
                                            y_bf16);
      } else {
        RowScaledGemvKernel<DType::kI8, TX, M, false>
            <<<grid, kThreads, 0, stream>>>(x, bytes, w.scales, w.rows, w.cols, group, splits, y,
                                            y_bf16);
      }
      break;
    case DType::kF8E4M3:
      if (vector) {
        RowScaledGemvKernel<DType::kF8E4M3, TX, M, true>
            <<<grid, kThreads, 0, stream>>>(x, bytes, w.scales, w.rows, w.cols, group, splits, y,
                                            y_bf16);
      } else {
        RowScaledGemvKernel<DType::kF8E4M3, TX, M, false>
            <<<grid, kThreads, 0, stream>>>(x, bytes, w.scales, w.rows, w.cols, group, splits, y,
                                            y_bf16);
      }
      break;
    default:  // kU4; the launcher has checked the dtype.
      if (vector) {
        Int4GemvKernel<TX, M, true><<<grid, kThreads, 0, stream>>>(
            x, bytes, w.scales, w.zeros, w.rows, w.cols, group, splits, y, y_bf16);
      } else {
        Int4GemvKernel<TX, M, false><<<grid, kThreads, 0, stream>>>(
            x, bytes, w.scales, w.zeros, w.rows, w.cols, group, splits, y, y_bf16);
      }
      break;
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }


template <typename TX>
void LaunchPasses(const TX* x, int m, const MatrixView& w, int group, bool vector, void* y,
                  bool y_bf16, cudaStream_t stream, std::string* error, bool* ok) {
  const size_t y_size = y_bf16 ? 2 : 4;
  for (int done = 0; done < m; done += kPassRows) {
    const int rows = m - done < kPassRows ? m - done : kPassRows;
    const TX* xp = x + static_cast<int64_t>(done) * w.cols;
    void* yp = static_cast<char*>(y) + static_cast<int64_t>(done) * w.rows * y_size;
    switch (rows) {
      case 1: LaunchPass<TX, 1>(xp, w, group, vector, yp, y_bf16, stream); break;
      case 2: LaunchPass<TX, 2>(xp, w, group, vector, yp, y_bf16, stream); break;
      case 3: LaunchPass<TX, 3>(xp, w, group, vector, yp, y_bf16, stream); break;
      default: LaunchPass<TX, 4>(xp, w, group, vector, yp, y_bf16, stream); break;
    }
    if (!CheckLaunch("QuantizedGemv", error)) {
      *ok = false;
      return;
    }
  }
  *ok = true;
}

}  // namespace

bool LaunchQuantizedGemv(const void* x, int m, MatrixView w, void* y, cudaStream_t stream,
                         std::string* error, DType x_dtype, DType y_dtype) {
  if (m < 1 || m > kQuantizedGemvMaxRows) {
    return Fail(error, "QuantizedGemv: m " + std::to_string(m) + " outside [1, " +
                           std::to_string(kQuantizedGemvMaxRows) + "]");
  }
  for (DType d : {x_dtype, y_dtype}) {
    if (d != DType::kF32 && d != DType::kBF16) {
      return Fail(error, std::string("QuantizedGemv: activation dtype ") + DTypeName(d) +
                             " is not supported (F32 or BF16)");
    }
  }
  if (!CheckQuantizedWeights(w, "QuantizedGemv", error)) return false;
  if (w.rows <= 0) return true;
  if (w.cols <= 0) {
    return Fail(error, "QuantizedGemv: K = 0 (the backend clears y itself)");
  }
  if ((w.rows + kRowsPerWarp - 1) / kRowsPerWarp > 0x7fffffff) {
    return Fail(error, "QuantizedGemv: " + std::to_string(w.rows) + " output rows exceed the grid");
  }
  const int group = QuantizedGroupSize(w);
  const bool aligned = Aligned16(w.data) && Aligned16(x);
  const bool vector = aligned && (w.dtype == DType::kU4 ? group % 32 == 0
                                                       : w.cols % 16 == 0 && group % 16 == 0);
  const bool y_bf16 = y_dtype == DType::kBF16;
  bool ok = false;
  if (x_dtype == DType::kBF16) {
    LaunchPasses(static_cast<const __nv_bfloat16*>(x), m, w, group, vector, y, y_bf16, stream,
                 error, &ok);
  } else {
    LaunchPasses(static_cast<const float*>(x), m, w, group, vector, y, y_bf16, stream, error,
                 &ok);
  }
  return ok;
}

}  // namespace tessera::kernels::gpu
