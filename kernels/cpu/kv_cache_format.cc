#include "kernels/cpu/kv_cache_format.h"

#include <cmath>
#include <cstring>

namespace tessera::kernels {

void StoreKvRow(const float* src, const KvCacheShape& shape, int64_t slot, int head, void* cache) {
  const int hd = shape.head_dim;
  const int64_t at = KvRowIndex(shape, slot, head);
  switch (shape.dtype) {
    case DType::kBF16: {
      uint16_t* dst = static_cast<uint16_t*>(cache) + at;
      for (int d = 0; d < hd; ++d) dst[d] = F32ToBf16(src[d]);
      return;
    }
    case DType::kF8E4M3: {
      float amax = 0.0f;
      for (int d = 0; d < hd; ++d) amax = std::fmax(amax, std::fabs(src[d]));
      const float scale = amax > 0.0f ? amax / kFp8E4M3Max : 1.0f;
      const float inv = 1.0f / scale;
      uint8_t* dst = static_cast<uint8_t*>(cache) + at;
      for (int d = 0; d < hd; ++d) dst[d] = F32ToFp8E4M3(src[d] * inv);
      KvScales(cache, shape)[slot * shape.num_kv_heads + head] = scale;
      return;
    }
    default:
      std::memcpy(static_cast<float*>(cache) + at, src, sizeof(float) * hd);
      return;
  }
}

void LoadKvRow(const void* cache, const KvCacheShape& shape, int64_t slot, int head, float* dst) {
  const int hd = shape.head_dim;
  const int64_t at = KvRowIndex(shape, slot, head);
  switch (shape.dtype) {
    case DType::kBF16: {
      const uint16_t* src = static_cast<const uint16_t*>(cache) + at;
      for (int d = 0; d < hd; ++d) dst[d] = Bf16ToF32(src[d]);
      return;
    }
    case DType::kF8E4M3: {
      const float scale = KvScales(cache, shape)[slot * shape.num_kv_heads + head];
      const uint8_t* src = static_cast<const uint8_t*>(cache) + at;
      for (int d = 0; d < hd; ++d) dst[d] = Fp8E4M3ToF32(src[d]) * scale;
      return;
    }
    default:
      std::memcpy(dst, static_cast<const float*>(cache) + at, sizeof(float) * hd);
      return;
  }
}

}  // namespace tessera::kernels
