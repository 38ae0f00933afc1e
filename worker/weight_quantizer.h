#ifndef TESSERA_WORKER_WEIGHT_QUANTIZER_H_
#define TESSERA_WORKER_WEIGHT_QUANTIZER_H_

#include <cstdint>

#include "common/dtype.h"
#include "common/quantization.h"

// Load-time weight quantization over the slice a rank holds, with absmax scales:
// FP8 per row (output channel), int8 per (row, group of kInt8WeightGroup columns).
namespace tessera {

// Columns sharing one int8 scale: as llama.cpp's Q8_0 blocks. stories260K has many
// near-tied next tokens (30 of 1,833 eval positions are within 0.03 logits), so the
// scale's precision shows in the gate: a float64 numpy forward flips 19 greedy choices
// with per-row scales, 19 with groups of 32 and BF16 scales rounded up (the previous
// format), 10 with FP16 scales and 7 with exact float scales; on a second text 19, 14
// and 18. FP16 keeps the byte cost of BF16 and the CPU kernel widens it with VCVTPH2PS.
inline constexpr int kInt8WeightGroup = 32;

// The stored element type of `q` (kI8 or kF8E4M3); kNone keeps the checkpoint's dtype.
DType QuantizedDType(WeightQuantization q);

// Scales per row of `cols` columns: ceil(cols / 32) for int8, 1 for FP8.
int64_t QuantizedScalesPerRow(WeightQuantization q, int64_t cols);

// Quantizes `w` [rows, cols] float into `out` (rows * cols bytes of QuantizedDType(q)) and
// `scales` [rows, QuantizedScalesPerRow(q, cols)].
// int8: s = absmax / 127 rounded to the nearest FP16 value (the CPU layout stores it
// exactly, as llama.cpp's Q8_0 does), q = clamp(round(w / s), -127, 127), symmetric
// (-128 is never used).
// fp8: s = absmax / 448, q = e4m3(w / s), round to nearest even.
// All-zero groups get scale 1 so dequantization never multiplies by 0/NaN.
void QuantizeRows(WeightQuantization q, const float* w, int64_t rows, int64_t cols,
                  uint8_t* out, float* scales);

// The float a quantized element stands for, before its scale.
float QuantizedValue(DType dtype, uint8_t byte);

}  // namespace tessera

#endif  // TESSERA_WORKER_WEIGHT_QUANTIZER_H_
