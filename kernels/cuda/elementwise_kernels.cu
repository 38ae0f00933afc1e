// Row and element-wise ops of the Backend interface. Kernel bodies first, launchers after.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <string>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launchers.h"

namespace tessera::kernels::gpu {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void EmbeddingGatherKernel(const int32_t* ids, int n, const T* table, int64_t rows,
                                      int64_t hidden, int64_t vocab_begin, float* out) {
  const int64_t total = static_cast<int64_t>(n) * hidden;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / hidden;
    const int64_t j = e % hidden;
    const int64_t local = static_cast<int64_t>(ids[i]) - vocab_begin;
    out[e] = (local >= 0 && local < rows) ? ToFloat(table[local * hidden + j]) : 0.0f;
  }
}

// One block per row. With `delta`, hidden += delta first and is written back; the norm is
// taken of the updated row. Each thread reads and writes only its own columns, so `out`
// may alias `x`.
__global__ void RmsNormKernel(const float* x, float* hidden, const float* delta,
                              const float* weight, int dim, float eps, float* out) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const float* in = x != nullptr ? x + row * dim : hidden + row * dim;
  float sum_sq = 0.0f;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) {
    float v = in[j];
    if (delta != nullptr) {
      v += delta[row * dim + j];
      hidden[row * dim + j] = v;
    }
    sum_sq += v * v;
  }
  const float total = BlockSum(sum_sq, scratch);
  const float inv_rms = 1.0f / sqrtf(total / static_cast<float>(dim) + eps);
  for (int j = threadIdx.x; j < dim; j += blockDim.x) {
    out[row * dim + j] = in[j] * inv_rms * weight[j];
  }
}

// One thread per rotated pair (i, i + head_dim / 2). The angle is the float32 product
// position * inv_freq[i], as on the CPU backend and in transformers; its cos and sin are
// taken in double so the two backends agree to float rounding.
__global__ void RopeKernel(float* qkv, int n, int row_stride, const int32_t* positions,
                           int heads, int head_dim, const float* inv_freq,
                           float cos_sin_scale) {
  const int half = head_dim / 2;
  const int64_t total = static_cast<int64_t>(n) * heads * half;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(e % half);
    const int h = static_cast<int>((e / half) % heads);
    const int64_t t = e / half / heads;
    const float angle = __fmul_rn(static_cast<float>(positions[t]), inv_freq[i]);
    double sd, cd;
    sincos(static_cast<double>(angle), &sd, &cd);
    const float c = static_cast<float>(cd) * cos_sin_scale;
    const float s = static_cast<float>(sd) * cos_sin_scale;
    float* p = qkv + t * row_stride + static_cast<int64_t>(h) * head_dim;
    const float x1 = p[i];
    const float x2 = p[i + half];
    p[i] = x1 * c - x2 * s;
    p[i + half] = x2 * c + x1 * s;
  }
}

__global__ void SiluMulKernel(const float* gate_up, int n, int inter, float* out) {
  const int64_t total = static_cast<int64_t>(n) * inter;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / inter;
    const int64_t j = e % inter;
    const float g = gate_up[i * 2 * inter + j];
    const float u = gate_up[i * 2 * inter + inter + j];
    out[e] = g / (1.0f + expf(-g)) * u;
  }
}

__device__ __forceinline__ void StoreAs(float x, float* out) { *out = x; }
__device__ __forceinline__ void StoreAs(float x, __nv_bfloat16* out) { *out = __float2bfloat16_rn(x); }

template <typename T>
__global__ void WriteKvCacheKernel(const float* k, const float* v, int row_stride,
                                   const int64_t* slots, int n, int64_t width, int64_t num_slots,
                                   T* k_cache, T* v_cache) {
  const int64_t total = static_cast<int64_t>(n) * width;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / width;
    const int64_t j = e % width;
    const int64_t slot = slots[i];
    if (slot < 0 || slot >= num_slots) continue;
    StoreAs(k[i * row_stride + j], &k_cache[slot * width + j]);
    StoreAs(v[i * row_stride + j], &v_cache[slot * width + j]);
  }
}

// FP8 rows: one warp per (token, head, K or V) finds the row's max |x|, stores x / scale
// with scale = max / 448 (saturating, like the CPU's F32ToFp8E4M3) and the scale.
__global__ void WriteKvCacheFp8Kernel(const float* k, const float* v, int row_stride,
                                      const int64_t* slots, int n, int heads, int head_dim,
                                      int64_t num_slots, uint8_t* k_cache, uint8_t* v_cache,
                                      float* k_scales, float* v_scales) {
  const int64_t warp = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= static_cast<int64_t>(n) * heads * 2) return;  // Whole warps exit together.
  const bool is_v = (warp & 1) != 0;
  const int64_t i = (warp / 2) / heads;
  const int h = static_cast<int>((warp / 2) % heads);
  const int64_t slot = slots[i];
  if (slot < 0 || slot >= num_slots) return;
  const float* src = (is_v ? v : k) + i * row_stride + static_cast<int64_t>(h) * head_dim;
  float amax = 0.0f;
  for (int d = lane; d < head_dim; d += 32) amax = fmaxf(amax, fabsf(src[d]));
  amax = WarpMax(amax);
  const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
  const float inv = 1.0f / scale;
  const int64_t row = slot * heads + h;
  uint8_t* dst = (is_v ? v_cache : k_cache) + row * head_dim;
  for (int d = lane; d < head_dim; d += 32) {
    const __nv_fp8_e4m3 q(src[d] * inv);
    dst[d] = q.__x;
  }
  if (lane == 0) (is_v ? v_scales : k_scales)[row] = scale;
}

__global__ void AddBiasKernel(float* y, const float* bias, int64_t total, int dim) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[e] += bias[e % dim];
  }
}

__global__ void AddKernel(float* y, const float* x, size_t n) {
  for (size_t e = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<size_t>(gridDim.x) * blockDim.x) {
    y[e] += x[e];
  }
}

template <typename T>
__global__ void ConvertKernel(const float* src, size_t n, T* dst);
template <>
__global__ void ConvertKernel<__nv_bfloat16>(const float* src, size_t n, __nv_bfloat16* dst) {
  for (size_t e = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[e] = __float2bfloat16_rn(src[e]);
  }
}
template <>
__global__ void ConvertKernel<__half>(const float* src, size_t n, __half* dst) {
  for (size_t e = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[e] = __float2half_rn(src[e]);
  }
}

}  // namespace

bool LaunchEmbeddingGather(const int32_t* ids, int n, MatrixView table, int64_t vocab_begin,
                           float* out, cudaStream_t stream, std::string* error) {
  if (n <= 0) return true;
  const int64_t total = static_cast<int64_t>(n) * table.cols;
  const unsigned grid = GridFor(total, kThreads);
  switch (table.dtype) {
    case DType::kF32:
      EmbeddingGatherKernel<<<grid, kThreads, 0, stream>>>(
          ids, n, static_cast<const float*>(table.data), table.rows, table.cols, vocab_begin,
          out);
      break;
    case DType::kBF16:
      EmbeddingGatherKernel<<<grid, kThreads, 0, stream>>>(
          ids, n, static_cast<const __nv_bfloat16*>(table.data), table.rows, table.cols,
          vocab_begin, out);
      break;
    case DType::kF16:
      EmbeddingGatherKernel<<<grid, kThreads, 0, stream>>>(
          ids, n, static_cast<const __half*>(table.data), table.rows, table.cols, vocab_begin,
          out);
      break;
    case DType::kI8:
    case DType::kF8E4M3:
    case DType::kI32:
    case DType::kU4:
      return Fail(error, "EmbeddingGather: quantized embedding tables are not supported");
  }
  return CheckLaunch("EmbeddingGather", error);
}

bool LaunchRmsNorm(const float* x, const float* weight, int n, int dim, float eps, float* out,
                   cudaStream_t stream, std::string* error) {
  if (n <= 0) return true;
  RmsNormKernel<<<n, kThreads, 0, stream>>>(x, nullptr, nullptr, weight, dim, eps, out);
  return CheckLaunch("RmsNorm", error);
}

bool LaunchAddRmsNorm(float* hidden, const float* delta, const float* weight, int n, int dim,
                      float eps, float* out, cudaStream_t stream, std::string* error) {
  if (n <= 0) return true;
  RmsNormKernel<<<n, kThreads, 0, stream>>>(nullptr, hidden, delta, weight, dim, eps, out);
  return CheckLaunch("AddRmsNorm", error);
}

bool LaunchRope(float* qkv, int n, int row_stride, const int32_t* positions, int num_q_heads,
                int num_kv_heads, int head_dim, const float* inv_freq, float cos_sin_scale,
                cudaStream_t stream, std::string* error) {
  if (head_dim <= 0 || head_dim % 2 != 0) {
    return Fail(error, "Rope: head_dim " + std::to_string(head_dim) + " must be even");
  }
  const int heads = num_q_heads + num_kv_heads;
  if (n <= 0 || heads <= 0) return true;
  const int64_t total = static_cast<int64_t>(n) * heads * (head_dim / 2);
  RopeKernel<<<GridFor(total, kThreads), kThreads, 0, stream>>>(qkv, n, row_stride, positions,
                                                                heads, head_dim, inv_freq,
                                                                cos_sin_scale);
  return CheckLaunch("Rope", error);
}

bool LaunchAddBias(float* y, const float* bias, int n, int dim, cudaStream_t stream,
                   std::string* error) {
  if (n <= 0 || dim <= 0) return true;
  const int64_t total = static_cast<int64_t>(n) * dim;
  AddBiasKernel<<<GridFor(total, kThreads), kThreads, 0, stream>>>(y, bias, total, dim);
  return CheckLaunch("AddBias", error);
}

bool LaunchSiluMul(const float* gate_up, int n, int inter, float* out, cudaStream_t stream,
                   std::string* error) {
  if (n <= 0 || inter <= 0) return true;
  SiluMulKernel<<<GridFor(static_cast<int64_t>(n) * inter, kThreads), kThreads, 0, stream>>>(
      gate_up, n, inter, out);
  return CheckLaunch("SiluMul", error);
}

bool LaunchWriteKvCache(const float* k, const float* v, int row_stride, const int64_t* slots,
                        int n, const KvCacheShape& shape, void* k_cache, void* v_cache,
                        cudaStream_t stream, std::string* error) {
  const int64_t width = static_cast<int64_t>(shape.num_kv_heads) * shape.head_dim;
  if (n <= 0 || width <= 0) return true;
  const int64_t num_slots = static_cast<int64_t>(shape.num_blocks) * shape.block_size;
  switch (shape.dtype) {
    case DType::kF32:
      WriteKvCacheKernel<<<GridFor(n * width, kThreads), kThreads, 0, stream>>>(
          k, v, row_stride, slots, n, width, num_slots, static_cast<float*>(k_cache),
          static_cast<float*>(v_cache));
      break;
    case DType::kBF16:
      WriteKvCacheKernel<<<GridFor(n * width, kThreads), kThreads, 0, stream>>>(
          k, v, row_stride, slots, n, width, num_slots, static_cast<__nv_bfloat16*>(k_cache),
          static_cast<__nv_bfloat16*>(v_cache));
      break;
    case DType::kF8E4M3: {
      auto scales = [&](void* cache) {
        return reinterpret_cast<float*>(static_cast<char*>(cache) + shape.scales_offset());
      };
      const int64_t threads = static_cast<int64_t>(n) * shape.num_kv_heads * 2 * 32;
      WriteKvCacheFp8Kernel<<<static_cast<unsigned>((threads + kThreads - 1) / kThreads), kThreads,
                              0, stream>>>(
          k, v, row_stride, slots, n, shape.num_kv_heads, shape.head_dim, num_slots,
          static_cast<uint8_t*>(k_cache), static_cast<uint8_t*>(v_cache), scales(k_cache),
          scales(v_cache));
      break;
    }
    default:
      return Fail(error, "WriteKvCache: unsupported cache dtype");
  }
  return CheckLaunch("WriteKvCache", error);
}

bool LaunchAdd(float* y, const float* x, size_t n, cudaStream_t stream, std::string* error) {
  if (n == 0) return true;
  AddKernel<<<GridFor(static_cast<int64_t>(n), kThreads), kThreads, 0, stream>>>(y, x, n);
  return CheckLaunch("Add", error);
}

bool LaunchConvertF32(const float* src, size_t n, DType dtype, void* dst, cudaStream_t stream,
                      std::string* error) {
  if (n == 0) return true;
  const unsigned grid = GridFor(static_cast<int64_t>(n), kThreads);
  switch (dtype) {
    case DType::kBF16:
      ConvertKernel<<<grid, kThreads, 0, stream>>>(src, n, static_cast<__nv_bfloat16*>(dst));
      break;
    case DType::kF16:
      ConvertKernel<<<grid, kThreads, 0, stream>>>(src, n, static_cast<__half*>(dst));
      break;
    case DType::kF32:
      return Fail(error, "ConvertF32: target dtype F32 needs no conversion kernel");
    case DType::kI8:
    case DType::kF8E4M3:
    case DType::kI32:
    case DType::kU4:
      return Fail(error, "ConvertF32: quantized targets need a scale; not a plain conversion");
  }
  return CheckLaunch("ConvertF32", error);
}

}  // namespace tessera::kernels::gpu
