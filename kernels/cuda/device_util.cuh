#ifndef TESSERA_KERNELS_CUDA_DEVICE_UTIL_CUH_
#define TESSERA_KERNELS_CUDA_DEVICE_UTIL_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

// Helpers shared by the .cu files: warp/block reductions, weight loads, launch checks.
namespace tessera::kernels::gpu {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Sum over the whole block; every thread gets the result. `scratch` holds 32 floats. All
// threads of the block must call it (it synchronises).
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int num_warps = (blockDim.x + 31) / 32;
  v = WarpSum(v);
  __syncthreads();  // `scratch` may still be read from a previous call.
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < num_warps; ++w) total += scratch[w];
  return total;
}

// Element `i` of a weight buffer of dtype code kF32 / kF16 / kBF16 as float.
template <typename T>
__device__ __forceinline__ float ToFloat(T v);
template <>
__device__ __forceinline__ float ToFloat<float>(float v) { return v; }
template <>
__device__ __forceinline__ float ToFloat<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <>
__device__ __forceinline__ float ToFloat<__half>(__half v) { return __half2float(v); }

// Turns the state after a launch into the launchers' bool + message convention.
inline bool CheckLaunch(const char* what, std::string* error) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return true;
  if (error != nullptr) {
    *error = std::string(what) + ": CUDA launch failed: " + cudaGetErrorString(err);
  }
  return false;
}

inline bool Fail(std::string* error, const std::string& message) {
  if (error != nullptr) *error = message;
  return false;
}

inline unsigned GridFor(int64_t elements, int threads) {
  int64_t blocks = (elements + threads - 1) / threads;
  // Grid-stride loops cover the rest; this bound keeps the grid within limits.
  if (blocks > (int64_t{1} << 30)) blocks = int64_t{1} << 30;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

}  // namespace tessera::kernels::gpu

#endif  // TESSERA_KERNELS_CUDA_DEVICE_UTIL_CUH_
