#ifndef TESSERA_KERNELS_CUDA_MOE_COMMON_CUH_
#define TESSERA_KERNELS_CUDA_MOE_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/quantized_value.h"

// What the expert kernels (moe_kernels.cu, moe_grouped_kernels.cu) share: reading one
// expert weight, whatever its dtype, as float32, and turning runtime dtypes into template
// parameters.
namespace tessera::kernels::gpu::moe {

// Weight element decoding by dtype. Load8 reads eight consecutive weights with one load
// (`p` aligned to 8 * kBytes); Load1 one weight. Quantized codes come back without their
// scale: the kernels apply per-row scales to a finished sum and group scales per chunk.
template <DType W>
struct Weight;

// F32 checkpoints (tests, and models kept in full precision) stream four bytes a weight.
template <>
struct Weight<DType::kF32> {
  static constexpr int kBytes = 4;
  static constexpr bool kQuantized = false;
  __device__ __forceinline__ static void Load8(const uint8_t* p, float* f) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(p));
    const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w;
    f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
  }
  __device__ __forceinline__ static float Load1(const uint8_t* p) {
    return __ldg(reinterpret_cast<const float*>(p));
  }
};

template <>
struct Weight<DType::kBF16> {
  static constexpr int kBytes = 2;
  static constexpr bool kQuantized = false;
  __device__ __forceinline__ static void Load8(const uint8_t* p, float* f) {
    Unpack8(__ldg(reinterpret_cast<const uint4*>(p)), static_cast<const __nv_bfloat16*>(nullptr),
            f);
  }
  __device__ __forceinline__ static float Load1(const uint8_t* p) {
    return __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(p));
  }
};

template <>
struct Weight<DType::kF16> {
  static constexpr int kBytes = 2;
  static constexpr bool kQuantized = false;
  __device__ __forceinline__ static void Load8(const uint8_t* p, float* f) {
    Unpack8(__ldg(reinterpret_cast<const uint4*>(p)), static_cast<const __half*>(nullptr), f);
  }
  __device__ __forceinline__ static float Load1(const uint8_t* p) {
    return __half2float(*reinterpret_cast<const __half*>(p));
  }
};

template <>
struct Weight<DType::kI8> {
  static constexpr int kBytes = 1;
  static constexpr bool kQuantized = true;
  __device__ __forceinline__ static void Load8(const uint8_t* p, float* f) {
    const uint2 raw = __ldg(reinterpret_cast<const uint2*>(p));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[i] = quantized::Int8Value(static_cast<uint8_t>(raw.x >> (8 * i)));
      f[4 + i] = quantized::Int8Value(static_cast<uint8_t>(raw.y >> (8 * i)));
    }
  }
  __device__ __forceinline__ static float Load1(const uint8_t* p) {
    return quantized::Int8Value(*p);
  }
};

template <>
struct Weight<DType::kF8E4M3> {
  static constexpr int kBytes = 1;
  static constexpr bool kQuantized = true;
  // Every E4M3 value (NaN included) is exact in FP16; sm_89+ converts a pair at a time.
  __device__ __forceinline__ static void Load8(const uint8_t* p, float* f) {
    const uint2 raw = __ldg(reinterpret_cast<const uint2*>(p));
    const uint32_t words[2] = {raw.x, raw.y};
#pragma unroll
    for (int w = 0; w < 2; ++w) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const __half2_raw pair = __nv_cvt_fp8x2_to_halfraw2(
            static_cast<__nv_fp8x2_storage_t>(words[w] >> (16 * j)), __NV_E4M3);
        const float2 v = __half22float2(__half2(pair));
        f[4 * w + 2 * j] = v.x;
        f[4 * w + 2 * j + 1] = v.y;
      }
    }
  }
  __device__ __forceinline__ static float Load1(const uint8_t* p) {
    return quantized::Fp8E4M3Value(*p);
  }
};

// Where one weight matrix's scales sit: per row (kF8E4M3, kI8 with group 0), per (row,
// group of `group` columns) (kI8 with a group), or none.
struct Scales {
  const float* data = nullptr;
  int group = 0;         // > 0: grouped.
  int64_t per_row = 0;   // Groups per row when grouped.

  __device__ __forceinline__ bool grouped() const { return group > 0; }
  // The scale of a finished row sum: 1 when grouped or unscaled.
  __device__ __forceinline__ float Row(int64_t row) const {
    return data != nullptr && group == 0 ? __ldg(data + row) : 1.0f;
  }
  // The scale of column `col` of `row` inside the sum: 1 unless grouped.
  __device__ __forceinline__ float Group(int64_t row, int64_t col) const {
    return group > 0 ? __ldg(data + row * per_row + col / group) : 1.0f;
  }
  // Both: the full scale of weight (row, col).
  __device__ __forceinline__ float Of(int64_t row, int64_t col) const {
    if (data == nullptr) return 1.0f;
    return group > 0 ? __ldg(data + row * per_row + col / group) : __ldg(data + row);
  }
};

// Scales of a [rows, cols] matrix of an expert, given the args' group for that matrix.
__device__ __forceinline__ Scales MakeScales(const float* data, int group, int64_t cols) {
  Scales s;
  s.data = data;
  s.group = data != nullptr ? group : 0;
  s.per_row = s.group > 0 ? (cols + s.group - 1) / s.group : 0;
  return s;
}

// The held expert a routed pair goes to, or -1.
__device__ __forceinline__ int LocalExpert(int32_t id, int first_expert, int num_local) {
  const int local = id - first_expert;
  return local >= 0 && local < num_local ? local : -1;
}

// Runtime dtypes to template parameters: fn(std::integral_constant<DType, W>{}) for a
// supported expert weight dtype (MoeExpertDtypeSupported), fn(T{}) with T float or
// __nv_bfloat16 for the activation dtype. False with a message otherwise.
template <typename Fn>
bool WithWeightDtype(DType w, const char* what, std::string* error, Fn&& fn) {
  switch (w) {
    case DType::kF32:
      fn(std::integral_constant<DType, DType::kF32>{});
      return true;
    case DType::kBF16:
      fn(std::integral_constant<DType, DType::kBF16>{});
      return true;
    case DType::kF16:
      fn(std::integral_constant<DType, DType::kF16>{});
      return true;
    case DType::kI8:
      fn(std::integral_constant<DType, DType::kI8>{});
      return true;
    case DType::kF8E4M3:
      fn(std::integral_constant<DType, DType::kF8E4M3>{});
      return true;
    default:
      return Fail(error, std::string(what) + ": expert weight dtype " + DTypeName(w) +
                             " is not supported on CUDA (F32, BF16, F16, I8 or F8_E4M3)");
  }
}

template <typename Fn>
bool WithActivation(DType act, const char* what, std::string* error, Fn&& fn) {
  switch (act) {
    case DType::kF32:
      fn(float{});
      return true;
    case DType::kBF16:
      fn(__nv_bfloat16{});
      return true;
    default:
      return Fail(error, std::string(what) + ": activation dtype " + DTypeName(act) +
                             " is not supported (F32 or BF16)");
  }
}

inline size_t AlignUp(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace tessera::kernels::gpu::moe

#endif  // TESSERA_KERNELS_CUDA_MOE_COMMON_CUH_
