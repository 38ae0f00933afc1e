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
          F32ToBf16(scales[r * groups + g]);
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
      Bf16ToF32(scales[(block * shape.groups() + c / kInt8GroupSize) * kInt8BlockRows + lane]);
  return scale * static_cast<float>(q);
}

}  // namespace tessera::kernels
