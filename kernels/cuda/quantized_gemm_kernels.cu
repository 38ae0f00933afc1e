// Prefill-sized GEMMs with weight-only quantized weights: the backend dequantizes the
// weights to BF16 in scratch here, scale (and zero) included, and runs its BF16 cuBLASLt
// GEMM. At large m the GEMM is compute bound, so the extra pass over the weights is a small
// part of the step; folding the scale into the weights spares a pass over y. Each BF16
// weight is s * value (or s * (q - z)) rounded once, the rounding a BF16 checkpoint has.
#include <cuda_bf16.h>

#include <string>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/quantized_value.h"

namespace tessera::kernels::gpu {
namespace {

constexpr int kThreads = 256;

// kI8 / kF8E4M3 with one scale per (row, group of `group` columns); group = cols for
// per-row scales. int8 made at load time has groups of 32 (worker/weight_quantizer.h).
template <DType D>
__global__ void DequantizeScaledKernel(const uint8_t* __restrict__ q,      // [rows, cols]
                                       const float* __restrict__ scales,   // [rows, groups]
                                       int64_t rows, int64_t cols, int64_t group,
                                       __nv_bfloat16* __restrict__ out) {  // [rows, cols]
  const int64_t n = rows * cols;
  const int64_t groups = (cols + group - 1) / group;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols;
    const float v = D == DType::kI8 ? quantized::Int8Value(q[i]) : quantized::Fp8E4M3Value(q[i]);
    out[i] = __float2bfloat16_rn(scales[r * groups + (i - r * cols) / group] * v);
  }
}

// One packed byte (two columns of one group, as group is even) per iteration.
__global__ void DequantizeInt4Kernel(const uint8_t* __restrict__ q,      // [rows, cols / 2]
                                     const float* __restrict__ scales,   // [rows, cols / group]
                                     const float* __restrict__ zeros,    // [rows, cols / group]
                                     int64_t rows, int64_t cols, int group,
                                     __nv_bfloat162* __restrict__ out) {  // [rows, cols / 2]
  const int64_t half = cols / 2;
  const int64_t groups = cols / group;
  const int64_t n = rows * half;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / half;
    const int64_t g = (i - r * half) * 2 / group;
    const float s = scales[r * groups + g];
    const float z = zeros[r * groups + g];
    const uint8_t b = q[i];
    const float lo = s * (static_cast<float>(b & 0xf) - z);
    const float hi = s * (static_cast<float>(b >> 4) - z);
    out[i] = __floats2bfloat162_rn(lo, hi);
  }
}

}  // namespace

bool CheckQuantizedWeights(const MatrixView& w, const char* what, std::string* error) {
  switch (w.dtype) {
    case DType::kI8:
    case DType::kF8E4M3:
      if (w.scales == nullptr) {
        return Fail(error, std::string(what) + ": " + DTypeName(w.dtype) +
                               " weights without their scales");
      }
      if (w.layout != WeightLayout::kRowMajor) {
        return Fail(error, std::string(what) + ": weights in the CPU backend's blocked layout");
      }
      return true;
    case DType::kU4: {
      if (w.scales == nullptr || w.zeros == nullptr) {
        return Fail(error, std::string(what) + ": U4 weights without scales and zeros");
      }
      const int group = QuantizedGroupSize(w);
      if (w.cols % 2 != 0 || group <= 0 || group % 2 != 0 || w.cols % group != 0) {
        return Fail(error, std::string(what) + ": U4 group size " +
                               std::to_string(w.group_size) + " must be even and divide the " +
                               std::to_string(w.cols) + " columns");
      }
      return true;
    }
    default:
      return Fail(error, std::string(what) + ": " + DTypeName(w.dtype) +
                             " is not a quantized weight dtype (want I8, F8_E4M3 or U4)");
  }
}

bool LaunchDequantizeToBf16(const MatrixView& w, void* out, cudaStream_t stream,
                            std::string* error) {
  if (!CheckQuantizedWeights(w, "DequantizeToBf16", error)) return false;
  if (w.rows <= 0 || w.cols <= 0) return true;
  const auto* bytes = static_cast<const uint8_t*>(w.data);
  switch (w.dtype) {
    case DType::kI8:
      DequantizeScaledKernel<DType::kI8><<<GridFor(w.rows * w.cols, kThreads), kThreads, 0,
                                           stream>>>(bytes, w.scales, w.rows, w.cols,
                                                     QuantizedGroupSize(w),
                                                     static_cast<__nv_bfloat16*>(out));
      break;
    case DType::kF8E4M3:
      DequantizeScaledKernel<DType::kF8E4M3><<<GridFor(w.rows * w.cols, kThreads), kThreads,
                                               0, stream>>>(
          bytes, w.scales, w.rows, w.cols, QuantizedGroupSize(w),
          static_cast<__nv_bfloat16*>(out));
      break;
    default:  // kU4, checked above.
      DequantizeInt4Kernel<<<GridFor(w.rows * (w.cols / 2), kThreads), kThreads, 0, stream>>>(
          bytes, w.scales, w.zeros, w.rows, w.cols, QuantizedGroupSize(w),
          static_cast<__nv_bfloat162*>(out));
      break;
  }
  return CheckLaunch("DequantizeToBf16", error);
}

}  // namespace tessera::kernels::gpu
