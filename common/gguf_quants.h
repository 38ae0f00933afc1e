#ifndef TESSERA_COMMON_GGUF_QUANTS_H_
#define TESSERA_COMMON_GGUF_QUANTS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "common/gguf_file.h"

// Decoding ggml's block formats. Dequantization follows the GGUF definition of each
// block (ggml-quants, the format's reference); the mappings onto Tessera's group-wise
// int8 and int4 weights keep the file's codes, so the served numbers are the file's.
namespace tessera {

// Whether DequantizeGgml reads `type`: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K.
bool GgmlDequantizable(GgmlType type);

// OK for the types above; UNIMPLEMENTED naming the type and listing the readable ones.
absl::Status GgmlReadable(GgmlType type);

// dst[0, n) = the first n elements at `src`; n must be a multiple of the block size.
// UNIMPLEMENTED naming the type for any type GgmlDequantizable refuses.
absl::Status DequantizeGgml(GgmlType type, const uint8_t* src, int64_t n, float* dst);

// The group of columns Tessera's int8 / int4 weights share a scale over when they carry a
// ggml block type's codes.
inline constexpr int kGgmlNativeGroup = 32;

// Q8_0 maps onto int8 weights in groups of 32: codes[c] and scales[c / 32] (the block's
// FP16 scale as a float) with w = scales * codes, exactly as the file defines it.
bool GgmlMapsToInt8(GgmlType type);
void GgmlRowToInt8(GgmlType type, const uint8_t* row, int64_t cols, int8_t* codes,
                   float* scales);

// Q4_0, Q4_1 and Q4_K map onto int4 weights in groups of 32: packed[c / 2] holds column c
// in its low (even c) or high nibble, and w = scales * (q - zeros) per group: Q4_0 has
// zero 8; Q4_1 (w = d q + m) zero -m / d; Q4_K (w = d sc q - dmin m) scale d sc and zero
// dmin m / (d sc). The codes are the file's; scale times zero reproduces the offset to
// float rounding. Returns false, leaving the outputs unspecified, when a group has a zero
// scale but a nonzero offset (no zero point can express it): the caller dequantizes.
bool GgmlMapsToInt4(GgmlType type);
bool GgmlRowToInt4(GgmlType type, const uint8_t* row, int64_t cols, uint8_t* packed,
                   float* scales, float* zeros);

}  // namespace tessera

#endif  // TESSERA_COMMON_GGUF_QUANTS_H_
