#include "kernels/cpu/int8_blocked.h"

#include <cstring>

#include "common/dtype.h"

namespace tessera::kernels {

void PackInt8Blocked(const int8_t* q, const float* scales, int64_t rows, int64_t cols,
                     uint8_t* out) {
  const Int8BlockedShape shape{rows, cols};
  const int64_t groups = shape.groups();
  std::memset(out, 0, shape.bytes());
  auto* scale_out = reinterpret_cast<uint16_t*>(out + shape.scales_offset());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t block = r / kInt8BlockRows;
    const int64_t lane = r % kInt8BlockRows;
    uint8_t* dst = out + block * shape.block_bytes() + lane * 2;
    for (int64_t c = 0; c < cols; ++c) {
      dst[(c / 2) * 2 * kInt8BlockRows + (c % 2)] = static_cast<uint8_t>(q[r * cols + c]);
    }
    for (int64_t g = 0; g < groups; ++g) {
      scale_out[(block * groups + g) * kInt8BlockRows + lane] =
          F32ToF16(scales[r * groups + g]);
    }
  }
}

float Int8BlockedWeight(const MatrixView& w, int64_t r, int64_t c) {
  const Int8BlockedShape shape{w.rows, w.cols};
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t block = r / kInt8BlockRows;
  const int64_t lane = r % kInt8BlockRows;
  const auto q = static_cast<int8_t>(
      base[block * shape.block_bytes() + (c / 2) * 2 * kInt8BlockRows + lane * 2 + (c % 2)]);
  const auto* scales = reinterpret_cast<const uint16_t*>(base + shape.scales_offset());
  const float scale =
      F16ToF32(scales[(block * shape.groups() + c / kInt8GroupSize) * kInt8BlockRows + lane]);
  return scale * static_cast<float>(q);
}

void PackInt4Blocked(const uint8_t* packed, const float* scales, const float* zeros,
                     int64_t rows, int64_t cols, int group, uint8_t* out) {
  const Int4BlockedShape shape{rows, cols, group};
  const int64_t src_groups = group > 0 && group < cols ? cols / group : 1;
  const int64_t groups = shape.weight_groups();
  std::memset(out, 0, shape.bytes());
  auto* scale_out = reinterpret_cast<float*>(out + shape.scales_offset());
  auto* zero_out = reinterpret_cast<float*>(out + shape.zeros_offset());
  const int64_t row_bytes = cols / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t block = r / kInt8BlockRows;
    const int64_t lane = r % kInt8BlockRows;
    uint8_t* dst = out + block * shape.block_bytes() + lane;
    // A row-major byte already holds columns 2p (low) and 2p + 1 (high): one pair unit.
    for (int64_t p = 0; p < row_bytes; ++p) dst[p * kInt8BlockRows] = packed[r * row_bytes + p];
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t at = (block * groups + g) * kInt8BlockRows + lane;
      scale_out[at] = scales[r * src_groups + g];
      zero_out[at] = zeros[r * src_groups + g];
    }
  }
}

float Int4BlockedWeight(const MatrixView& w, int64_t r, int64_t c) {
  const Int4BlockedShape shape{w.rows, w.cols, w.group_size};
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t block = r / kInt8BlockRows;
  const int64_t lane = r % kInt8BlockRows;
  const uint8_t byte = base[block * shape.block_bytes() + (c / 2) * kInt8BlockRows + lane];
  const int q = (byte >> (4 * (c % 2))) & 0xf;
  const int64_t at =
      (block * shape.weight_groups() + c / shape.group_cols()) * kInt8BlockRows + lane;
  const float s = reinterpret_cast<const float*>(base + shape.scales_offset())[at];
  const float z = reinterpret_cast<const float*>(base + shape.zeros_offset())[at];
  return s * (static_cast<float>(q) - z);
}

}  // namespace tessera::kernels
