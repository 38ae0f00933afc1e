#ifndef TESSERA_KERNELS_CPU_INT8_BLOCKED_H_
#define TESSERA_KERNELS_CPU_INT8_BLOCKED_H_

#include <cstddef>
#include <cstdint>

#include "kernels/backend.h"

// WeightLayout::kInt8Blocked16, the CPU backend's int8 weights (see backend.h). Decode
// streams one byte per weight plus one FP16 scale per 32 (1.0625 bytes, as llama.cpp's
// Q8_0); a block of 16 rows is one contiguous run, and within it each 32-byte pair unit
// sign-extends into the 16 x 2 lanes VPDPWSSD multiplies against one broadcast pair of
// 16-bit activations, so the kernel never reduces across lanes.
namespace tessera::kernels {

inline constexpr int64_t kInt8BlockRows = 16;
inline constexpr int kInt8GroupSize = 32;

struct Int8BlockedShape {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_blocks() const { return (rows + kInt8BlockRows - 1) / kInt8BlockRows; }
  int64_t groups() const { return (cols + kInt8GroupSize - 1) / kInt8GroupSize; }
  int64_t padded_cols() const { return groups() * kInt8GroupSize; }
  // Bytes of one block of 16 rows.
  size_t block_bytes() const { return static_cast<size_t>(padded_cols()) * kInt8BlockRows; }
  size_t scales_offset() const {
    return (static_cast<size_t>(row_blocks()) * block_bytes() + 63) / 64 * 64;
  }
  size_t bytes() const {
    return scales_offset() +
           static_cast<size_t>(row_blocks() * groups() * kInt8BlockRows) * sizeof(uint16_t);
  }
};

// Packs row-major int8 `q` [rows, cols] with float `scales` [rows, groups] (each exactly an
// FP16 value, as QuantizeRows makes them) into `out` (Int8BlockedShape::bytes()).
void PackInt8Blocked(const int8_t* q, const float* scales, int64_t rows, int64_t cols,
                     uint8_t* out);

// The weight w[r][c] of a packed matrix, scale applied (for tests and debugging).
float Int8BlockedWeight(const MatrixView& w, int64_t r, int64_t c);

// WeightLayout::kU4Blocked16, the CPU backend's GPTQ/AWQ weights: the same blocks of 16
// rows and column pairs, 16 bytes per pair unit (row i's byte at i, even column in the
// low nibble), columns zero-padded to groups of 32; then, 64-byte aligned, the float
// scales and then the zeros per (block, weight group, row). A unit zero-extends to the
// 16 x 2 int16 lanes of VPDPWSSD with one shift and one bit-select.
struct Int4BlockedShape {
  int64_t rows = 0;
  int64_t cols = 0;
  int group = 0;  // Columns per scale; 0 or >= cols: the whole row.
  int64_t row_blocks() const { return (rows + kInt8BlockRows - 1) / kInt8BlockRows; }
  int64_t padded_cols() const {
    return (cols + kInt8GroupSize - 1) / kInt8GroupSize * kInt8GroupSize;
  }
  int64_t group_cols() const { return group > 0 && group < cols ? group : padded_cols(); }
  int64_t weight_groups() const { return padded_cols() / group_cols(); }
  size_t block_bytes() const { return static_cast<size_t>(padded_cols()) / 2 * kInt8BlockRows; }
  size_t table_bytes() const {
    return static_cast<size_t>(row_blocks() * weight_groups() * kInt8BlockRows) * sizeof(float);
  }
  size_t scales_offset() const {
    return (static_cast<size_t>(row_blocks()) * block_bytes() + 63) / 64 * 64;
  }
  size_t zeros_offset() const { return scales_offset() + (table_bytes() + 63) / 64 * 64; }
  size_t bytes() const { return zeros_offset() + table_bytes(); }
};

// Whether int4 weights with `group` columns per scale fit the blocked layout: whole rows,
// or groups that are whole activation groups (GPTQ/AWQ use 32, 64 or 128).
inline bool Int4Blockable(int64_t cols, int group) {
  return group <= 0 || group >= cols || group % kInt8GroupSize == 0;
}

// Packs row-major kU4 codes [rows, cols / 2] (low nibble = even column) with float scales
// and zeros [rows, cols / group] into `out` (Int4BlockedShape::bytes()).
void PackInt4Blocked(const uint8_t* packed, const float* scales, const float* zeros,
                     int64_t rows, int64_t cols, int group, uint8_t* out);

// The weight s * (q - z) of a packed int4 matrix (for tests and debugging).
float Int4BlockedWeight(const MatrixView& w, int64_t r, int64_t c);

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CPU_INT8_BLOCKED_H_
