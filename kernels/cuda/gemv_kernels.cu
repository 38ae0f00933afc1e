// GEMV for decode-sized batches (m <= 8) with BF16/F16 weights. Decode is bound by weight
// bytes: each warp streams kRowsPerWarp weight rows with 128-bit loads (8 elements per lane
// per step) and applies them to all m activation rows (float32 or BF16, widened as they
// are read and re-read from L1/L2); float32 accumulation, y float32 or BF16.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launchers.h"

namespace tessera::kernels::gpu {
namespace {

constexpr int kGemvThreads = 256;
constexpr int kRowsPerWarp = 2;
constexpr int kRowsPerBlock = (kGemvThreads / 32) * kRowsPerWarp;

template <typename T, typename TX, int M, bool kVector>
__global__ void __launch_bounds__(kGemvThreads)
    GemvKernel(const TX* __restrict__ x, const T* __restrict__ w, int64_t n_out, int64_t k,
               void* __restrict__ y, bool y_bf16) {
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * (kGemvThreads / 32) + warp) *
                       kRowsPerWarp;
  float acc[M][kRowsPerWarp];
  for (int mm = 0; mm < M; ++mm) {
    for (int r = 0; r < kRowsPerWarp; ++r) acc[mm][r] = 0.0f;
  }

  if constexpr (kVector) {
    const int64_t chunks = k / 8;
#pragma unroll 2
    for (int64_t c = lane; c < chunks; c += 32) {
      float wf[kRowsPerWarp][8];
      for (int r = 0; r < kRowsPerWarp; ++r) {
        if (row0 + r < n_out) {
          const uint4 raw = __ldg(reinterpret_cast<const uint4*>(w + (row0 + r) * k) + c);
          Unpack8(raw, w, wf[r]);
        } else {
          for (int i = 0; i < 8; ++i) wf[r][i] = 0.0f;
        }
      }
      for (int mm = 0; mm < M; ++mm) {
        float xv[8];
        LoadAct8(x, mm * k + 8 * c, xv);
        for (int r = 0; r < kRowsPerWarp; ++r) {
          for (int i = 0; i < 8; ++i) acc[mm][r] += wf[r][i] * xv[i];
        }
      }
    }
  } else {
    for (int64_t kk = lane; kk < k; kk += 32) {
      float wf[kRowsPerWarp];
      for (int r = 0; r < kRowsPerWarp; ++r) {
        wf[r] = row0 + r < n_out ? ToFloat(w[(row0 + r) * k + kk]) : 0.0f;
      }
      for (int mm = 0; mm < M; ++mm) {
        const float xv = ToFloat(x[mm * k + kk]);
        for (int r = 0; r < kRowsPerWarp; ++r) acc[mm][r] += wf[r] * xv;
      }
    }
  }

  for (int mm = 0; mm < M; ++mm) {
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const float total = WarpSum(acc[mm][r]);
      if (lane == 0 && row0 + r < n_out) StoreAct(y, mm * n_out + row0 + r, total, y_bf16);
    }
  }
}

template <typename T, typename TX, int M>
void LaunchFor(const TX* x, const T* w, int64_t n_out, int64_t k, void* y, bool y_bf16,
               bool vector, cudaStream_t stream) {
  const unsigned grid = static_cast<unsigned>((n_out + kRowsPerBlock - 1) / kRowsPerBlock);
  if (vector) {
    GemvKernel<T, TX, M, true><<<grid, kGemvThreads, 0, stream>>>(x, w, n_out, k, y, y_bf16);
  } else {
    GemvKernel<T, TX, M, false><<<grid, kGemvThreads, 0, stream>>>(x, w, n_out, k, y, y_bf16);
  }
}

template <typename T, typename TX>
void LaunchRows(int m, const TX* x, const T* w, int64_t n_out, int64_t k, void* y, bool y_bf16,
                bool vector, cudaStream_t stream) {
  switch (m) {
    case 1: LaunchFor<T, TX, 1>(x, w, n_out, k, y, y_bf16, vector, stream); break;
    case 2: LaunchFor<T, TX, 2>(x, w, n_out, k, y, y_bf16, vector, stream); break;
    case 3: LaunchFor<T, TX, 3>(x, w, n_out, k, y, y_bf16, vector, stream); break;
    case 4: LaunchFor<T, TX, 4>(x, w, n_out, k, y, y_bf16, vector, stream); break;
    case 5: LaunchFor<T, TX, 5>(x, w, n_out, k, y, y_bf16, vector, stream); break;
    case 6: LaunchFor<T, TX, 6>(x, w, n_out, k, y, y_bf16, vector, stream); break;
    case 7: LaunchFor<T, TX, 7>(x, w, n_out, k, y, y_bf16, vector, stream); break;
    case 8: LaunchFor<T, TX, 8>(x, w, n_out, k, y, y_bf16, vector, stream); break;
  }
}

template <typename T>
void LaunchTyped(int m, const void* x, bool x_bf16, const T* w, int64_t n_out, int64_t k,
                 void* y, bool y_bf16, bool vector, cudaStream_t stream) {
  if (x_bf16) {
    LaunchRows(m, static_cast<const __nv_bfloat16*>(x), w, n_out, k, y, y_bf16, vector, stream);
  } else {
    LaunchRows(m, static_cast<const float*>(x), w, n_out, k, y, y_bf16, vector, stream);
  }
}

}  // namespace

bool LaunchGemv(const void* x, int m, MatrixView w, void* y, cudaStream_t stream,
                std::string* error, DType x_dtype, DType y_dtype) {
  if (m < 1 || m > kGemvMaxRows) {
    return Fail(error, "Gemv: m " + std::to_string(m) + " outside [1, " +
                           std::to_string(kGemvMaxRows) + "]");
  }
  if (w.dtype != DType::kBF16 && w.dtype != DType::kF16) {
    return Fail(error, std::string("Gemv: weight dtype ") + DTypeName(w.dtype) +
                           " is not supported (BF16 or F16)");
  }
  for (DType d : {x_dtype, y_dtype}) {
    if (d != DType::kF32 && d != DType::kBF16) {
      return Fail(error, std::string("Gemv: activation dtype ") + DTypeName(d) +
                             " is not supported (F32 or BF16)");
    }
  }
  if (w.rows <= 0) return true;
  if (static_cast<int64_t>(w.rows + kRowsPerBlock - 1) / kRowsPerBlock > 0x7fffffff) {
    return Fail(error, "Gemv: " + std::to_string(w.rows) + " output rows exceed the grid");
  }
  const bool vector = w.cols % 8 == 0 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const bool x_bf16 = x_dtype == DType::kBF16;
  const bool y_bf16 = y_dtype == DType::kBF16;
  if (w.dtype == DType::kBF16) {
    LaunchTyped(m, x, x_bf16, static_cast<const __nv_bfloat16*>(w.data), w.rows, w.cols, y,
                y_bf16, vector, stream);
  } else {
    LaunchTyped(m, x, x_bf16, static_cast<const __half*>(w.data), w.rows, w.cols, y, y_bf16,
                vector, stream);
  }
  return CheckLaunch("Gemv", error);
}

}  // namespace tessera::kernels::gpu
