#include "worker/weight_quantizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tessera {
namespace {

// absmax / 127 rounded to the nearest FP16 value, never 0. A maximum that then lands
// just past 127 (at most 127 * (1 + 2^-11)) is clamped, an error below half a code.
float Int8Scale(float absmax) {
  if (absmax <= 0.0f) return 1.0f;
  const uint16_t h = F32ToF16(absmax / 127.0f);
  return F16ToF32(h != 0 ? h : uint16_t{1});  // Below FP16's range: its smallest step.
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
        const float scale = Int8Scale(absmax);
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
