// FP8 E4M3 activations for the FP8 x FP8 prefill GEMM (sm_89+ tensor cores): a dynamic
// per-tensor scale, amax / 448, so the largest activation maps to E4M3's largest finite
// value, then saturating conversion. The scale stays on the device (no host round trip in
// the step); the column-scale kernel multiplies it back with the weights' row scales.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <string>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launchers.h"

namespace tessera::kernels::gpu {
namespace {

constexpr int kThreads = 256;
constexpr float kE4M3Max = 448.0f;

// *amax_bits = max(*amax_bits, bits of max |x[i]|). Non-negative floats order like their
// bits, so an unsigned atomicMax is a float max; NaN (bits above +inf) wins, and propagates.
template <typename T>
__global__ void AbsMaxKernel(const T* __restrict__ x, size_t n,
                             unsigned int* __restrict__ amax_bits) {
  __shared__ float scratch[32];
  float m = 0.0f;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    m = fmaxf(m, fabsf(ToFloat(x[i])));
  }
  m = WarpMax(m);
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  if (lane == 0) scratch[warp] = m;
  __syncthreads();
  if (warp == 0) {
    m = lane < (blockDim.x + 31) / 32 ? scratch[lane] : 0.0f;
    m = WarpMax(m);
    if (lane == 0) atomicMax(amax_bits, __float_as_uint(m));
  }
}

// out[i] = E4M3(x[i] / scale), saturating, scale = amax / 448 (1 for an all-zero input).
// Every block derives the scale from the amax itself (there is no grid-wide barrier to do
// it once); block 0 also stores it in its own slot for the column-scale pass, so no block
// reads memory another block writes.
template <typename T>
__global__ void QuantizeKernel(const T* __restrict__ x, size_t n,
                               const unsigned int* __restrict__ amax_bits,
                               __nv_fp8_storage_t* __restrict__ out,
                               float* __restrict__ scale_out) {
  const float amax = __uint_as_float(*amax_bits);
  const float scale = amax > 0.0f ? amax / kE4M3Max : 1.0f;
  const float inv = 1.0f / scale;
  if (blockIdx.x == 0 && threadIdx.x == 0) *scale_out = scale;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] = __nv_cvt_float_to_fp8(ToFloat(x[i]) * inv, __NV_SATFINITE, __NV_E4M3);
  }
}

// y may be src (float32 output in place): each element is read, then written, by one thread.
template <typename TY>
__global__ void ScaleColumnsKernel(const float* src,                      // [m, n]
                                   const float* __restrict__ col_scales,   // [n]
                                   const float* __restrict__ tensor_scale, // [1]
                                   int64_t m, int64_t n, TY* y) {          // [m, n]
  const float t = *tensor_scale;
  const int64_t total = m * n;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    StoreAs(src[i] * (col_scales[i % n] * t), &y[i]);
  }
}

}  // namespace

size_t Fp8ActivationWorkspaceBytes(size_t n) { return (n + 255) / 256 * 256 + 256; }

bool LaunchQuantizeActivationsFp8(const void* x, size_t n, void* workspace, void** out,
                                  float** scale, cudaStream_t stream, std::string* error,
                                  DType x_dtype) {
  if (x_dtype != DType::kF32 && x_dtype != DType::kBF16) {
    return Fail(error, std::string("QuantizeActivationsFp8: activation dtype ") +
                           DTypeName(x_dtype) + " is not supported (F32 or BF16)");
  }
  auto* base = static_cast<uint8_t*>(workspace);
  auto* codes = reinterpret_cast<__nv_fp8_storage_t*>(base);
  auto* amax_bits = reinterpret_cast<unsigned int*>(base + (n + 255) / 256 * 256);
  auto* scale_slot = reinterpret_cast<float*>(amax_bits + 1);
  *out = codes;
  *scale = scale_slot;
  if (const cudaError_t e = cudaMemsetAsync(amax_bits, 0, sizeof(unsigned int), stream);
      e != cudaSuccess) {
    return Fail(error, std::string("QuantizeActivationsFp8: cudaMemsetAsync failed: ") +
                           cudaGetErrorString(e));
  }
  if (n == 0) return true;
  const unsigned grid = GridFor(static_cast<int64_t>(n), kThreads);
  // The amax needs no more blocks than fill the device a few times over.
  const unsigned reduce_grid = grid < 1024 ? grid : 1024;
  auto launch = [&](const auto* typed) {
    AbsMaxKernel<<<reduce_grid, kThreads, 0, stream>>>(typed, n, amax_bits);
    if (!CheckLaunch("QuantizeActivationsFp8 (amax)", error)) return false;
    QuantizeKernel<<<grid, kThreads, 0, stream>>>(typed, n, amax_bits, codes, scale_slot);
    return CheckLaunch("QuantizeActivationsFp8", error);
  };
  return x_dtype == DType::kBF16 ? launch(static_cast<const __nv_bfloat16*>(x))
                                 : launch(static_cast<const float*>(x));
}

bool LaunchScaleColumns(const float* src, const float* col_scales, const float* tensor_scale,
                        int64_t m, int64_t n, void* y, cudaStream_t stream, std::string* error,
                        DType y_dtype) {
  if (y_dtype != DType::kF32 && y_dtype != DType::kBF16) {
    return Fail(error, std::string("ScaleColumns: output dtype ") + DTypeName(y_dtype) +
                           " is not supported (F32 or BF16)");
  }
  if (m <= 0 || n <= 0) return true;
  if (col_scales == nullptr || tensor_scale == nullptr) {
    return Fail(error, "ScaleColumns: missing scales");
  }
  if (y_dtype == DType::kBF16) {
    ScaleColumnsKernel<<<GridFor(m * n, kThreads), kThreads, 0, stream>>>(
        src, col_scales, tensor_scale, m, n, static_cast<__nv_bfloat16*>(y));
  } else {
    ScaleColumnsKernel<<<GridFor(m * n, kThreads), kThreads, 0, stream>>>(
        src, col_scales, tensor_scale, m, n, static_cast<float*>(y));
  }
  return CheckLaunch("ScaleColumns", error);
}

}  // namespace tessera::kernels::gpu
