#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "benchmarks/gpu/fill_random.h"

namespace tessera::bench {
namespace {

__device__ __forceinline__ float UniformAt(uint64_t seed, size_t i) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (i + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
}

template <typename T>
__device__ __forceinline__ T FromFloat(float f);
template <>
__device__ __forceinline__ float FromFloat<float>(float f) { return f; }
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float f) {
  return __float2bfloat16_rn(f);
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float f) { return __float2half_rn(f); }

template <typename T>
__global__ void FillKernel(T* dst, size_t n, float scale, uint64_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[i] = FromFloat<T>(UniformAt(seed, i) * scale);
  }
}

}  // namespace

bool FillRandom(void* dst, size_t n, DType dtype, float scale, uint64_t seed,
                cudaStream_t stream) {
  if (n == 0) return true;
  constexpr int kThreads = 256;
  const unsigned grid = static_cast<unsigned>(std::min<size_t>((n + kThreads - 1) / kThreads,
                                                               size_t{1} << 20));
  switch (dtype) {
    case DType::kF32:
      FillKernel<<<grid, kThreads, 0, stream>>>(static_cast<float*>(dst), n, scale, seed);
      break;
    case DType::kBF16:
      FillKernel<<<grid, kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(dst), n, scale,
                                                seed);
      break;
    case DType::kF16:
      FillKernel<<<grid, kThreads, 0, stream>>>(static_cast<__half*>(dst), n, scale, seed);
      break;
    case DType::kI8:
    case DType::kF8E4M3:
    case DType::kI32:
    case DType::kU4:
      return false;  // Random checkpoints are written in 16/32-bit types and quantized on load.
  }
  return cudaGetLastError() == cudaSuccess;
}

}  // namespace tessera::bench
