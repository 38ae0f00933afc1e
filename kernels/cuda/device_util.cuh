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

// ---- Activations: float32 or BF16 (the backend's activation dtype), always float in
// registers. Kernels that stream activations (elementwise ops, KV writes, the FP8
// quantizer, the GEMVs' x) are templated on the element type (ToFloat / StoreAs, LoadAct4 /
// LoadAct8). Where a kernel touches an activation once per row or per output (attention's
// q and out, the GEMVs' y) it takes an untyped pointer and a block-uniform `bf16` flag
// (LoadAct / StoreAct): the branch costs nothing there, and the attention kernels' many
// (head_dim, cache, GQA group) instantiations are not doubled.
__device__ __forceinline__ float LoadAct(const void* p, int64_t i, bool bf16) {
  return bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i])
              : static_cast<const float*>(p)[i];
}
__device__ __forceinline__ void StoreAct(void* p, int64_t i, float v, bool bf16) {
  if (bf16) {
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  } else {
    static_cast<float*>(p)[i] = v;
  }
}
__device__ __forceinline__ void StoreAs(float x, float* out) { *out = x; }
__device__ __forceinline__ void StoreAs(float x, __nv_bfloat16* out) {
  *out = __float2bfloat16_rn(x);
}
__device__ __forceinline__ void StoreAs(float x, __half* out) { *out = __float2half_rn(x); }

// Four consecutive activations x[i .. i + 3] (x + i 16-byte aligned for float, 8-byte for
// BF16) and eight (32 / 16 bytes).
__device__ __forceinline__ float4 LoadAct4(const float* x, int64_t i) {
  return __ldg(reinterpret_cast<const float4*>(x + i));
}
__device__ __forceinline__ float4 LoadAct4(const __nv_bfloat16* x, int64_t i) {
  const uint2 raw = __ldg(reinterpret_cast<const uint2*>(x + i));
  return make_float4(__uint_as_float(raw.x << 16), __uint_as_float(raw.x & 0xffff0000u),
                     __uint_as_float(raw.y << 16), __uint_as_float(raw.y & 0xffff0000u));
}
template <typename TX>
__device__ __forceinline__ void LoadAct8(const TX* x, int64_t i, float* f) {
  const float4 a = LoadAct4(x, i);
  const float4 b = LoadAct4(x, i + 4);
  f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
  f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}

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

// Eight packed 16-bit weights (one 128-bit load) to floats.
__device__ __forceinline__ void Unpack8(const uint4& raw, const __nv_bfloat16*, float* f) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(words[i] << 16);
    f[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ void Unpack8(const uint4& raw, const __half*, float* f) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
  for (int i = 0; i < 4; ++i) {
    __half2 h;
    memcpy(&h, &words[i], sizeof(h));
    const float2 v = __half22float2(h);
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}

}  // namespace tessera::kernels::gpu

#endif  // TESSERA_KERNELS_CUDA_DEVICE_UTIL_CUH_
