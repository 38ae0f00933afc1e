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

// One block per row. With `delta` (activations), hidden += delta first and is written
// back; the norm is taken of the updated float32 row. Each thread reads and writes only its
// own columns, so `out` may alias `x` (float32 activations only).
template <typename T>
__global__ void RmsNormKernel(const float* x, float* hidden, const T* delta,
                              const float* weight, int dim, float eps, T* out) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const float* in = x != nullptr ? x + row * dim : hidden + row * dim;
  float sum_sq = 0.0f;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) {
    float v = in[j];
    if (delta != nullptr) {
      v += ToFloat(delta[row * dim + j]);
      hidden[row * dim + j] = v;
    }
    sum_sq += v * v;
  }
  const float total = BlockSum(sum_sq, scratch);
  const float inv_rms = 1.0f / sqrtf(total / static_cast<float>(dim) + eps);
  for (int j = threadIdx.x; j < dim; j += blockDim.x) {
    StoreAs(in[j] * inv_rms * weight[j], &out[row * dim + j]);
  }
}

// One thread per rotated pair (i, i + head_dim / 2). The angle is the float32 product
// position * inv_freq[i], as on the CPU backend and in transformers; its cos and sin are
// taken in double so the two backends agree to float rounding.
template <typename T>
__global__ void RopeKernel(T* qkv, int n, int row_stride, const int32_t* positions,
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
    T* p = qkv + t * row_stride + static_cast<int64_t>(h) * head_dim;
    const float x1 = ToFloat(p[i]);
    const float x2 = ToFloat(p[i + half]);
    StoreAs(x1 * c - x2 * s, &p[i]);
    StoreAs(x2 * c + x1 * s, &p[i + half]);
  }
}

template <typename T>
__global__ void SiluMulKernel(const T* gate_up, int n, int inter, T* out) {
  const int64_t total = static_cast<int64_t>(n) * inter;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / inter;
    const int64_t j = e % inter;
    const float g = ToFloat(gate_up[i * 2 * inter + j]);
    const float u = ToFloat(gate_up[i * 2 * inter + inter + j]);
    StoreAs(g / (1.0f + expf(-g)) * u, &out[e]);
  }
}

template <typename TIn, typename T>
__global__ void WriteKvCacheKernel(const TIn* k, const TIn* v, int row_stride,
                                   const int64_t* slots, int n, int64_t width, int64_t num_slots,
                                   T* k_cache, T* v_cache) {
  const int64_t total = static_cast<int64_t>(n) * width;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / width;
    const int64_t j = e % width;
    const int64_t slot = slots[i];
    if (slot < 0 || slot >= num_slots) continue;
    StoreAs(ToFloat(k[i * row_stride + j]), &k_cache[slot * width + j]);
    StoreAs(ToFloat(v[i * row_stride + j]), &v_cache[slot * width + j]);
  }
}

// FP8 rows: one warp per (token, head, K or V) finds the row's max |x|, stores x / scale
// with scale = max / 448 (saturating, like the CPU's F32ToFp8E4M3) and the scale.
template <typename TIn>
__global__ void WriteKvCacheFp8Kernel(const TIn* k, const TIn* v, int row_stride,
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
  const TIn* src = (is_v ? v : k) + i * row_stride + static_cast<int64_t>(h) * head_dim;
  float amax = 0.0f;
  for (int d = lane; d < head_dim; d += 32) amax = fmaxf(amax, fabsf(ToFloat(src[d])));
  amax = WarpMax(amax);
  const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
  const float inv = 1.0f / scale;
  const int64_t row = slot * heads + h;
  uint8_t* dst = (is_v ? v_cache : k_cache) + row * head_dim;
  for (int d = lane; d < head_dim; d += 32) {
    const __nv_fp8_e4m3 q(ToFloat(src[d]) * inv);
    dst[d] = q.__x;
  }
  if (lane == 0) (is_v ? v_scales : k_scales)[row] = scale;
}

template <typename T>
__global__ void AddBiasKernel(T* y, const float* bias, int64_t total, int dim) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    StoreAs(ToFloat(y[e]) + bias[e % dim], &y[e]);
  }
}

template <typename T>
__global__ void AddKernel(T* y, const T* x, size_t n) {
  for (size_t e = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<size_t>(gridDim.x) * blockDim.x) {
    StoreAs(ToFloat(y[e]) + ToFloat(x[e]), &y[e]);
  }
}

// One warp per (row, head) of the first num_heads heads, in place: each lane re-reads only
// the elements it summed, so no other lane's write can reach them first.
template <typename T>
__global__ void HeadRmsNormKernel(T* x, int n, int row_stride, int num_heads, int head_dim,
                                  const float* weight, float eps) {
  const int64_t warp = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= static_cast<int64_t>(n) * num_heads) return;  // Whole warps exit together.
  T* head = x + warp / num_heads * row_stride + warp % num_heads * head_dim;
  float sum_sq = 0.0f;
  for (int d = lane; d < head_dim; d += 32) {
    const float v = ToFloat(head[d]);
    sum_sq += v * v;
  }
  const float inv_rms = 1.0f / sqrtf(WarpSum(sum_sq) / static_cast<float>(head_dim) + eps);
  for (int d = lane; d < head_dim; d += 32) {
    StoreAs(ToFloat(head[d]) * inv_rms * weight[d], &head[d]);
  }
}

template <typename T>
__global__ void AddSigmoidGatedKernel(T* y, const T* x, const float* gate_logits,
                                      int64_t total, int dim) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float gate = 1.0f / (1.0f + expf(-gate_logits[e / dim]));
    StoreAs(ToFloat(y[e]) + gate * ToFloat(x[e]), &y[e]);
  }
}

// dst[e] = round-to-nearest-even(src[e]) in Out (a widening or a narrowing).
template <typename In, typename Out>
__global__ void ConvertKernel(const In* src, size_t n, Out* dst) {
  for (size_t e = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<size_t>(gridDim.x) * blockDim.x) {
    StoreAs(ToFloat(src[e]), &dst[e]);
  }
}

// Runtime activation dtype to template type: launch(T{}) with T float or __nv_bfloat16
// (a value of the type, used only for its type); false with a message for other dtypes.
template <typename Launch>
bool WithActivationType(DType act, const char* what, std::string* error, Launch&& launch) {
  switch (act) {
    case DType::kF32:
      launch(float{});
      return true;
    case DType::kBF16:
      launch(__nv_bfloat16{});
      return true;
    default:
      return Fail(error, std::string(what) + ": activation dtype " + DTypeName(act) +
                             " is not supported (F32 or BF16)");
  }
}

// One block per row; 16-byte words where the row and both pointers allow, else bytes.
__global__ void GatherRowsKernel(const char* __restrict__ src, const int32_t* __restrict__ rows,
                                 size_t row_bytes, char* __restrict__ dst, bool wide) {
  const char* from = src + static_cast<size_t>(rows[blockIdx.x]) * row_bytes;
  char* to = dst + static_cast<size_t>(blockIdx.x) * row_bytes;
  if (wide) {
    const size_t words = row_bytes / sizeof(uint4);
    for (size_t i = threadIdx.x; i < words; i += blockDim.x) {
      reinterpret_cast<uint4*>(to)[i] = reinterpret_cast<const uint4*>(from)[i];
    }
    return;
  }
  for (size_t i = threadIdx.x; i < row_bytes; i += blockDim.x) to[i] = from[i];
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

bool LaunchRmsNorm(const float* x, const float* weight, int n, int dim, float eps, void* out,
                   cudaStream_t stream, std::string* error, DType act) {
  if (n <= 0) return WithActivationType(act, "RmsNorm", error, [](auto) {});
  if (!WithActivationType(act, "RmsNorm", error, [&](auto t) {
        using T = decltype(t);
        RmsNormKernel<T><<<n, kThreads, 0, stream>>>(x, nullptr, nullptr, weight, dim, eps,
                                                     static_cast<T*>(out));
      })) {
    return false;
  }
  return CheckLaunch("RmsNorm", error);
}

bool LaunchAddRmsNorm(float* hidden, const void* delta, const float* weight, int n, int dim,
                      float eps, void* out, cudaStream_t stream, std::string* error, DType act) {
  if (n <= 0) return WithActivationType(act, "AddRmsNorm", error, [](auto) {});
  if (!WithActivationType(act, "AddRmsNorm", error, [&](auto t) {
        using T = decltype(t);
        RmsNormKernel<T><<<n, kThreads, 0, stream>>>(nullptr, hidden,
                                                     static_cast<const T*>(delta), weight, dim,
                                                     eps, static_cast<T*>(out));
      })) {
    return false;
  }
  return CheckLaunch("AddRmsNorm", error);
}

bool LaunchRope(void* qkv, int n, int row_stride, const int32_t* positions, int num_q_heads,
                int num_kv_heads, int head_dim, const float* inv_freq, float cos_sin_scale,
                cudaStream_t stream, std::string* error, DType act) {
  if (head_dim <= 0 || head_dim % 2 != 0) {
    return Fail(error, "Rope: head_dim " + std::to_string(head_dim) + " must be even");
  }
  const int heads = num_q_heads + num_kv_heads;
  if (n <= 0 || heads <= 0) return WithActivationType(act, "Rope", error, [](auto) {});
  const int64_t total = static_cast<int64_t>(n) * heads * (head_dim / 2);
  if (!WithActivationType(act, "Rope", error, [&](auto t) {
        using T = decltype(t);
        RopeKernel<T><<<GridFor(total, kThreads), kThreads, 0, stream>>>(
            static_cast<T*>(qkv), n, row_stride, positions, heads, head_dim, inv_freq,
            cos_sin_scale);
      })) {
    return false;
  }
  return CheckLaunch("Rope", error);
}

bool LaunchAddBias(void* y, const float* bias, int n, int dim, cudaStream_t stream,
                   std::string* error, DType act) {
  if (n <= 0 || dim <= 0) return WithActivationType(act, "AddBias", error, [](auto) {});
  const int64_t total = static_cast<int64_t>(n) * dim;
  if (!WithActivationType(act, "AddBias", error, [&](auto t) {
        using T = decltype(t);
        AddBiasKernel<T><<<GridFor(total, kThreads), kThreads, 0, stream>>>(
            static_cast<T*>(y), bias, total, dim);
      })) {
    return false;
  }
  return CheckLaunch("AddBias", error);
}

bool LaunchSiluMul(const void* gate_up, int n, int inter, void* out, cudaStream_t stream,
                   std::string* error, DType act) {
  if (n <= 0 || inter <= 0) return WithActivationType(act, "SiluMul", error, [](auto) {});
  if (!WithActivationType(act, "SiluMul", error, [&](auto t) {
        using T = decltype(t);
        SiluMulKernel<T><<<GridFor(static_cast<int64_t>(n) * inter, kThreads), kThreads, 0,
                           stream>>>(static_cast<const T*>(gate_up), n, inter,
                                     static_cast<T*>(out));
      })) {
    return false;
  }
  return CheckLaunch("SiluMul", error);
}

bool LaunchWriteKvCache(const void* k, const void* v, int row_stride, const int64_t* slots,
                        int n, const KvCacheShape& shape, void* k_cache, void* v_cache,
                        cudaStream_t stream, std::string* error, DType act) {
  const int64_t width = static_cast<int64_t>(shape.num_kv_heads) * shape.head_dim;
  if (n <= 0 || width <= 0) return WithActivationType(act, "WriteKvCache", error, [](auto) {});
  if (shape.dtype != DType::kF32 && shape.dtype != DType::kBF16 &&
      shape.dtype != DType::kF8E4M3) {
    return Fail(error, "WriteKvCache: unsupported cache dtype");
  }
  const int64_t num_slots = static_cast<int64_t>(shape.num_blocks) * shape.block_size;
  if (!WithActivationType(act, "WriteKvCache", error, [&](auto t) {
        using TIn = decltype(t);
        const auto* k_rows = static_cast<const TIn*>(k);
        const auto* v_rows = static_cast<const TIn*>(v);
        switch (shape.dtype) {
          case DType::kF32:
            WriteKvCacheKernel<<<GridFor(n * width, kThreads), kThreads, 0, stream>>>(
                k_rows, v_rows, row_stride, slots, n, width, num_slots,
                static_cast<float*>(k_cache), static_cast<float*>(v_cache));
            break;
          case DType::kBF16:
            WriteKvCacheKernel<<<GridFor(n * width, kThreads), kThreads, 0, stream>>>(
                k_rows, v_rows, row_stride, slots, n, width, num_slots,
                static_cast<__nv_bfloat16*>(k_cache), static_cast<__nv_bfloat16*>(v_cache));
            break;
          default: {  // kF8E4M3 (checked above).
            auto scales = [&](void* cache) {
              return reinterpret_cast<float*>(static_cast<char*>(cache) + shape.scales_offset());
            };
            const int64_t threads = static_cast<int64_t>(n) * shape.num_kv_heads * 2 * 32;
            WriteKvCacheFp8Kernel<<<static_cast<unsigned>((threads + kThreads - 1) / kThreads),
                                    kThreads, 0, stream>>>(
                k_rows, v_rows, row_stride, slots, n, shape.num_kv_heads, shape.head_dim,
                num_slots, static_cast<uint8_t*>(k_cache), static_cast<uint8_t*>(v_cache),
                scales(k_cache), scales(v_cache));
            break;
          }
        }
      })) {
    return false;
  }
  return CheckLaunch("WriteKvCache", error);
}

bool LaunchGatherRows(const void* src, const int32_t* rows, int n, size_t row_bytes, void* dst,
                     cudaStream_t stream, std::string* error) {
  if (n <= 0 || row_bytes == 0) return true;
  const bool wide = row_bytes % sizeof(uint4) == 0 &&
                    reinterpret_cast<uintptr_t>(src) % sizeof(uint4) == 0 &&
                    reinterpret_cast<uintptr_t>(dst) % sizeof(uint4) == 0;
  GatherRowsKernel<<<n, kThreads, 0, stream>>>(static_cast<const char*>(src), rows, row_bytes,
                                               static_cast<char*>(dst), wide);
  return CheckLaunch("GatherRows", error);
}

bool LaunchAdd(void* y, const void* x, size_t n, cudaStream_t stream, std::string* error,
               DType act) {
  if (n == 0) return WithActivationType(act, "Add", error, [](auto) {});
  if (!WithActivationType(act, "Add", error, [&](auto t) {
        using T = decltype(t);
        AddKernel<T><<<GridFor(static_cast<int64_t>(n), kThreads), kThreads, 0, stream>>>(
            static_cast<T*>(y), static_cast<const T*>(x), n);
      })) {
    return false;
  }
  return CheckLaunch("Add", error);
}

bool LaunchHeadRmsNorm(void* x, int n, int row_stride, int num_heads, int head_dim,
                       const float* weight, float eps, cudaStream_t stream, std::string* error,
                       DType act) {
  if (n <= 0 || num_heads <= 0 || head_dim <= 0) {
    return WithActivationType(act, "HeadRmsNorm", error, [](auto) {});
  }
  if (static_cast<int64_t>(num_heads) * head_dim > row_stride) {
    return Fail(error, "HeadRmsNorm: " + std::to_string(num_heads) + " heads of " +
                           std::to_string(head_dim) + " exceed the row stride " +
                           std::to_string(row_stride));
  }
  const int64_t threads = static_cast<int64_t>(n) * num_heads * 32;
  if (!WithActivationType(act, "HeadRmsNorm", error, [&](auto t) {
        using T = decltype(t);
        HeadRmsNormKernel<T><<<GridFor(threads, kThreads), kThreads, 0, stream>>>(
            static_cast<T*>(x), n, row_stride, num_heads, head_dim, weight, eps);
      })) {
    return false;
  }
  return CheckLaunch("HeadRmsNorm", error);
}

bool LaunchAddSigmoidGated(void* y, const void* x, const float* gate_logits, int n, int dim,
                           cudaStream_t stream, std::string* error, DType act) {
  if (n <= 0 || dim <= 0) return WithActivationType(act, "AddSigmoidGated", error, [](auto) {});
  const int64_t total = static_cast<int64_t>(n) * dim;
  if (!WithActivationType(act, "AddSigmoidGated", error, [&](auto t) {
        using T = decltype(t);
        AddSigmoidGatedKernel<T><<<GridFor(total, kThreads), kThreads, 0, stream>>>(
            static_cast<T*>(y), static_cast<const T*>(x), gate_logits, total, dim);
      })) {
    return false;
  }
  return CheckLaunch("AddSigmoidGated", error);
}

bool LaunchConvert(const void* src, DType src_dtype, size_t n, DType dtype, void* dst,
                   cudaStream_t stream, std::string* error) {
  if (n == 0) return true;
  const unsigned grid = GridFor(static_cast<int64_t>(n), kThreads);
  auto to = [&](auto* in) {
    switch (dtype) {
      case DType::kF32:
        ConvertKernel<<<grid, kThreads, 0, stream>>>(in, n, static_cast<float*>(dst));
        return true;
      case DType::kBF16:
        ConvertKernel<<<grid, kThreads, 0, stream>>>(in, n, static_cast<__nv_bfloat16*>(dst));
        return true;
      case DType::kF16:
        ConvertKernel<<<grid, kThreads, 0, stream>>>(in, n, static_cast<__half*>(dst));
        return true;
      default:
        return false;
    }
  };
  bool ok = false;
  if (src_dtype != dtype) {
    switch (src_dtype) {
      case DType::kF32: ok = to(static_cast<const float*>(src)); break;
      case DType::kBF16: ok = to(static_cast<const __nv_bfloat16*>(src)); break;
      case DType::kF16: ok = to(static_cast<const __half*>(src)); break;
      default: break;
    }
  }
  if (!ok) {
    return Fail(error, std::string("Convert: ") + DTypeName(src_dtype) + " to " +
                           DTypeName(dtype) +
                           " is not a conversion between two of F32, BF16 and F16");
  }
  return CheckLaunch("Convert", error);
}

}  // namespace tessera::kernels::gpu
