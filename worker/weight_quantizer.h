#ifndef TESSERA_WORKER_WEIGHT_QUANTIZER_H_
#define TESSERA_WORKER_WEIGHT_QUANTIZER_H_

#include <cstdint>

#include "common/dtype.h"
#include "common/quantization.h"

// Load-time weight quantization with one absmax scale per row (output channel), over the
// slice a rank holds: w[r][c] ~= scales[r] * value(q[r][c]).
namespace tessera {

// The stored element type of `q` (kI8 or kF8E4M3); kNone keeps the checkpoint's dtype.
DType QuantizedDType(WeightQuantization q);

// Quantizes `w` [rows, cols] float into `out` (rows * cols bytes of QuantizedDType(q)) and
// `scales` [rows]. int8: s = absmax / 127, q = round(w / s) clamped to +-127 (symmetric, so
// -128 is never used). fp8: s = absmax / 448, q = e4m3(w / s), round to nearest even.
// All-zero rows get scale 1 so dequantization never divides by or multiplies with 0/NaN.
void QuantizeRows(WeightQuantization q, const float* w, int64_t rows, int64_t cols,
                  uint8_t* out, float* scales);

// The float a quantized element stands for, before its row scale.
float QuantizedValue(DType dtype, uint8_t byte);

}  // namespace tessera

#endif  // TESSERA_WORKER_WEIGHT_QUANTIZER_H_
