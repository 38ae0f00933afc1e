#include "worker/weight_quantizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tessera {
namespace {

// The smallest BF16 value >= f (f finite and positive).
float RoundUpToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0xffffu) != 0) bits = (bits & 0xffff0000u) + 0x10000u;
  std::memcpy(&f, &bits, sizeof bits);
  return f;
}

float AbsMax(const float* v, int64_t n) {
  float absmax = 0.0f;
  for (int64_t i = 0; i < n; ++i) absmax = std::max(absmax, std::fabs(v[i]));
  return absmax;
}

}  // namespace

DType QuantizedDType(WeightQuantization q) {
  switch (q) {
    case WeightQuantization::kInt8: return DType::kI8;
    case WeightQuantization::kFp8: return DType::kF8E4M3;
    case WeightQuantization::kNone: break;
  }
  return DType::kF32;
}

int64_t QuantizedScalesPerRow(WeightQuantization q, int64_t cols) {
  if (q == WeightQuantization::kInt8) return (cols + kInt8WeightGroup - 1) / kInt8WeightGroup;
  return 1;
}

void QuantizeRows(WeightQuantization q, const float* w, int64_t rows, int64_t cols,
                  uint8_t* out, float* scales) {
  const int64_t groups = QuantizedScalesPerRow(q, cols);
  const int64_t group_cols = q == WeightQuantization::kInt8 ? kInt8WeightGroup : cols;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t begin = g * group_cols;
      const int64_t n = std::min(cols, begin + group_cols) - begin;
      const float* src = w + r * cols + begin;
      uint8_t* dst = out + r * cols + begin;
      const float absmax = AbsMax(src, n);
      if (q == WeightQuantization::kInt8) {
        const float scale = absmax > 0.0f ? RoundUpToBf16(absmax / 127.0f) : 1.0f;
        scales[r * groups + g] = scale;
        for (int64_t c = 0; c < n; ++c) {
          // nearbyint rounds half to even, like torch.round.
          const float v = std::clamp(std::nearbyint(src[c] / scale), -127.0f, 127.0f);
          dst[c] = static_cast<uint8_t>(static_cast<int8_t>(v));
        }
      } else {
        const float scale = absmax > 0.0f ? absmax / 448.0f : 1.0f;
        scales[r * groups + g] = scale;
        for (int64_t c = 0; c < n; ++c) dst[c] = F32ToFp8E4M3(src[c] / scale);
      }
    }
  }
}

float QuantizedValue(DType dtype, uint8_t byte) {
  if (dtype == DType::kI8) return static_cast<float>(static_cast<int8_t>(byte));
  return Fp8E4M3ToF32(byte);
}

}  // namespace tessera
