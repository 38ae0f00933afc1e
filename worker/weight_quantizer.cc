#include "worker/weight_quantizer.h"

#include <algorithm>
#include <cmath>

namespace tessera {

DType QuantizedDType(WeightQuantization q) {
  switch (q) {
    case WeightQuantization::kInt8: return DType::kI8;
    case WeightQuantization::kFp8: return DType::kF8E4M3;
    case WeightQuantization::kNone: break;
  }
  return DType::kF32;
}

void QuantizeRows(WeightQuantization q, const float* w, int64_t rows, int64_t cols,
                  uint8_t* out, float* scales) {
  const float max_code = q == WeightQuantization::kInt8 ? 127.0f : 448.0f;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    uint8_t* dst = out + r * cols;
    float absmax = 0.0f;
    for (int64_t c = 0; c < cols; ++c) absmax = std::max(absmax, std::fabs(row[c]));
    const float scale = absmax > 0.0f ? absmax / max_code : 1.0f;
    scales[r] = scale;
    if (q == WeightQuantization::kInt8) {
      for (int64_t c = 0; c < cols; ++c) {
        // nearbyint rounds half to even, like torch.round.
        const float v = std::clamp(std::nearbyint(row[c] / scale), -127.0f, 127.0f);
        dst[c] = static_cast<uint8_t>(static_cast<int8_t>(v));
      }
    } else {
      for (int64_t c = 0; c < cols; ++c) dst[c] = F32ToFp8E4M3(row[c] / scale);
    }
  }
}

float QuantizedValue(DType dtype, uint8_t byte) {
  if (dtype == DType::kI8) return static_cast<float>(static_cast<int8_t>(byte));
  return Fp8E4M3ToF32(byte);
}

}  // namespace tessera
