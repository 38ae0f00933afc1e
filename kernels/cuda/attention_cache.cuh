#ifndef TESSERA_KERNELS_CUDA_ATTENTION_CACHE_CUH_
#define TESSERA_KERNELS_CUDA_ATTENTION_CACHE_CUH_

// How the paged-attention kernels (attention_kernels.cu, attention_prefill_kernels.cu) read
// each KV cache element type, and the argument checks their launchers share.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <string>

#include "common/dtype.h"
#include "kernels/backend.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launchers.h"

namespace tessera::kernels::gpu {

// Raw cache bytes as 32-bit words, loaded in one 16- or 8-byte access (Words<4>, Words<2>)
// and widened to floats by the cache type; the split-K kernel keeps several in flight.
template <int kWords>
struct Words {
  uint32_t w[kWords];
};

template <int kWords>
__device__ __forceinline__ Words<kWords> LoadWords(const void* base, int64_t byte_off) {
  const char* p = static_cast<const char*>(base) + byte_off;
  Words<kWords> r;
  if constexpr (kWords == 4) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
    r.w[0] = v.x;
    r.w[1] = v.y;
    r.w[2] = v.z;
    r.w[3] = v.w;
  } else if constexpr (kWords == 2) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
    r.w[0] = v.x;
    r.w[1] = v.y;
  } else {
    static_assert(kWords == 1, "1, 2 or 4 words");
    r.w[0] = __ldg(reinterpret_cast<const unsigned int*>(p));
  }
  return r;
}

// How each cache element type is read: four consecutive elements at element offset `off`
// as floats (times the row's scale for FP8, applied by the kernels through Scale()), or
// (Widen) the elements packed in raw words. kBytes: bytes per element.
struct F32Cache {
  static constexpr bool kScaled = false;
  static constexpr int kBytes = 4;
  template <int kWords>
  __device__ static void Widen(const Words<kWords>& r, float* out) {
    for (int i = 0; i < kWords; ++i) out[i] = __uint_as_float(r.w[i]);
  }
  __device__ static float4 Load4(const void* c, int64_t off) {
    return *reinterpret_cast<const float4*>(static_cast<const float*>(c) + off);
  }
  __device__ static float Load(const void* c, int64_t off) {
    return static_cast<const float*>(c)[off];
  }
};

struct Bf16Cache {
  static constexpr bool kScaled = false;
  static constexpr int kBytes = 2;
  // BF16 is the top half of a float32: widening is a shift (low element) or a mask.
  template <int kWords>
  __device__ static void Widen(const Words<kWords>& r, float* out) {
    for (int i = 0; i < kWords; ++i) {
      out[2 * i] = __uint_as_float(r.w[i] << 16);
      out[2 * i + 1] = __uint_as_float(r.w[i] & 0xffff0000u);
    }
  }
  __device__ static float4 Load4(const void* c, int64_t off) {
    const uint2 raw = *reinterpret_cast<const uint2*>(static_cast<const __nv_bfloat16*>(c) + off);
    const __nv_bfloat162 a = *reinterpret_cast<const __nv_bfloat162*>(&raw.x);
    const __nv_bfloat162 b = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
    const float2 fa = __bfloat1622float2(a), fb = __bfloat1622float2(b);
    return make_float4(fa.x, fa.y, fb.x, fb.y);
  }
  __device__ static float Load(const void* c, int64_t off) {
    return __bfloat162float(static_cast<const __nv_bfloat16*>(c)[off]);
  }
};

struct Fp8Cache {
  static constexpr bool kScaled = true;
  static constexpr int kBytes = 1;
  // Pairs through the f16x2 conversion (one instruction on sm_89+); E4M3 is exact in FP16,
  // so the values equal Convert()'s.
  template <int kWords>
  __device__ static void Widen(const Words<kWords>& r, float* out) {
    for (int i = 0; i < kWords; ++i) {
      for (int h = 0; h < 2; ++h) {
        const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(
            static_cast<__nv_fp8x2_storage_t>((r.w[i] >> (16 * h)) & 0xffffu), __NV_E4M3);
        const float2 f = __half22float2(__half2(raw));
        out[4 * i + 2 * h] = f.x;
        out[4 * i + 2 * h + 1] = f.y;
      }
    }
  }
  __device__ static float Convert(uint8_t b) {
    return static_cast<float>(*reinterpret_cast<const __nv_fp8_e4m3*>(&b));
  }
  __device__ static float4 Load4(const void* c, int64_t off) {
    const uint32_t raw = *reinterpret_cast<const uint32_t*>(static_cast<const uint8_t*>(c) + off);
    return make_float4(Convert(raw & 0xff), Convert((raw >> 8) & 0xff), Convert((raw >> 16) & 0xff),
                       Convert(raw >> 24));
  }
  __device__ static float Load(const void* c, int64_t off) {
    return Convert(static_cast<const uint8_t*>(c)[off]);
  }
};

// The scale of the row at element offset `row_off` (a multiple of D): 1 unless FP8.
template <class Cache, int D>
__device__ __forceinline__ float Scale(const float* scales, int64_t row_off) {
  if constexpr (Cache::kScaled) return scales[row_off / D];
  return 1.0f;
}

inline bool CheckActivations(const char* what, DType act, std::string* error) {
  if (act == DType::kF32 || act == DType::kBF16) return true;
  return Fail(error, std::string(what) + ": activation dtype " + DTypeName(act) +
                         " is not supported (F32 or BF16)");
}

inline bool CheckShapes(const char* what, const AttentionBatch& batch, const KvCacheShape& shape,
                 int num_q_heads, std::string* error) {
  if (!AttentionHeadDimSupported(shape.head_dim)) {
    return Fail(error, std::string(what) + ": head_dim " + std::to_string(shape.head_dim) +
                           " is not supported (supported: 8, 16, 32, 64, 128)");
  }
  if (shape.num_kv_heads <= 0 || num_q_heads <= 0 || num_q_heads % shape.num_kv_heads != 0) {
    return Fail(error, std::string(what) + ": num_q_heads " + std::to_string(num_q_heads) +
                           " is not a positive multiple of num_kv_heads " +
                           std::to_string(shape.num_kv_heads));
  }
  if (shape.block_size <= 0) {
    return Fail(error, std::string(what) + ": block_size " + std::to_string(shape.block_size) +
                           " must be positive");
  }
  if (batch.num_tokens > 65535 * 1024 || num_q_heads > 65535) {
    return Fail(error, std::string(what) + ": grid too large (num_tokens " +
                           std::to_string(batch.num_tokens) + ", num_q_heads " +
                           std::to_string(num_q_heads) + ")");
  }
  return true;
}

}  // namespace tessera::kernels::gpu

#endif  // TESSERA_KERNELS_CUDA_ATTENTION_CACHE_CUH_
