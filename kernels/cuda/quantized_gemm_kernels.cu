// Weight-only int8 / FP8 E4M3 GEMM support: the backend dequantizes the weight bytes to
// BF16 in scratch (exact: int8 needs 8 significant bits and E4M3 values 4 with exponents in
// BF16's range), runs its BF16 GEMM, then multiplies each output column by its row scale.
// int8 with group scales is dequantized with its scales applied (one BF16 rounding).
// Correctness first: a fused decode GEMV that reads the bytes once would halve the traffic.
#include <cuda_bf16.h>

#include <string>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/quantized_value.h"

namespace tessera::kernels::gpu {
namespace {

constexpr int kThreads = 256;

template <DType D>
__global__ void DequantizeKernel(const uint8_t* __restrict__ q,  // [n] quantized bytes
                                 size_t n,
                                 __nv_bfloat16* __restrict__ out) {  // [n]
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float v = D == DType::kI8 ? quantized::Int8Value(q[i]) : quantized::Fp8E4M3Value(q[i]);
    out[i] = __float2bfloat16_rn(v);
  }
}

// int8 with one scale per (row, group of columns): w = scale * q, rounded to BF16 once.
__global__ void DequantizeGroupedInt8Kernel(const int8_t* __restrict__ q,      // [rows, cols]
                                            const float* __restrict__ scales,  // [rows, groups]
                                            int64_t rows, int64_t cols, int group,
                                            __nv_bfloat16* __restrict__ out) {
  const int64_t groups = (cols + group - 1) / group;
  const int64_t total = rows * cols;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols;
    const int64_t c = i - r * cols;
    out[i] = __float2bfloat16_rn(scales[r * groups + c / group] * static_cast<float>(q[i]));
  }
}

__global__ void ScaleColumnsKernel(float* __restrict__ y,             // [m, n]
                                   const float* __restrict__ scales,  // [n]
                                   int64_t m, int64_t n) {
  const int64_t total = m * n;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] *= scales[i % n];
  }
}

}  // namespace

bool LaunchDequantizeToBf16(const void* q, DType dtype, size_t n, void* out,
                            cudaStream_t stream, std::string* error) {
  if (n == 0) return true;
  const unsigned grid = GridFor(static_cast<int64_t>(n), kThreads);
  const auto* bytes = static_cast<const uint8_t*>(q);
  auto* dst = static_cast<__nv_bfloat16*>(out);
  switch (dtype) {
    case DType::kI8:
      DequantizeKernel<DType::kI8><<<grid, kThreads, 0, stream>>>(bytes, n, dst);
      break;
    case DType::kF8E4M3:
      DequantizeKernel<DType::kF8E4M3><<<grid, kThreads, 0, stream>>>(bytes, n, dst);
      break;
    default:
      return Fail(error, std::string("DequantizeToBf16: ") + DTypeName(dtype) +
                             " is not a quantized weight dtype (want I8 or F8_E4M3)");
  }
  return CheckLaunch("DequantizeToBf16", error);
}

bool LaunchDequantizeGroupedInt8ToBf16(const void* q, const float* scales, int64_t rows,
                                       int64_t cols, int group_size, void* out,
                                       cudaStream_t stream, std::string* error) {
  if (rows <= 0 || cols <= 0) return true;
  if (scales == nullptr || group_size <= 0) {
    return Fail(error, "DequantizeGroupedInt8ToBf16: int8 weights without group scales");
  }
  DequantizeGroupedInt8Kernel<<<GridFor(rows * cols, kThreads), kThreads, 0, stream>>>(
      static_cast<const int8_t*>(q), scales, rows, cols, group_size,
      static_cast<__nv_bfloat16*>(out));
  return CheckLaunch("DequantizeGroupedInt8ToBf16", error);
}

bool LaunchScaleColumns(float* y, const float* scales, int64_t m, int64_t n,
                        cudaStream_t stream, std::string* error) {
  if (m <= 0 || n <= 0) return true;
  if (scales == nullptr) return Fail(error, "ScaleColumns: quantized weights without scales");
  ScaleColumnsKernel<<<GridFor(m * n, kThreads), kThreads, 0, stream>>>(y, scales, m, n);
  return CheckLaunch("ScaleColumns", error);
}

}  // namespace tessera::kernels::gpu
