#include "common/gguf_quants.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/status_macros.h"

namespace tessera {
namespace {

uint16_t U16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
float Half(const uint8_t* p) { return F16ToF32(U16(p)); }

// Q4_K's eight 6-bit sub-block scales and mins, packed into 12 bytes.
void Q4KScaleMin(const uint8_t* q, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Block layouts (bytes): Q4_0 {f16 d; u8 qs[16]}, Q4_1 {f16 d, m; u8 qs[16]}: element j
// in the low nibble of qs[j], element j + 16 in the high one. Q8_0 {f16 d; i8 qs[32]}.
// Q4_K {f16 d, dmin; u8 scales[12]; u8 qs[128]}: four runs of 64 elements, each run's 32
// bytes holding sub-block 2r in the low nibbles and 2r + 1 in the high ones. Q6_K
// {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}.
void DequantQ4_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((b[2 + j] & 0xF) - 8) * d;
    y[j + 16] = static_cast<float>((b[2 + j] >> 4) - 8) * d;
  }
}

void DequantQ4_1(const uint8_t* b, float* y) {
  const float d = Half(b), m = Half(b + 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(b[4 + j] & 0xF) * d + m;
    y[j + 16] = static_cast<float>(b[4 + j] >> 4) * d + m;
  }
}

// Q5_0 {f16 d; u8 qh[4]; u8 qs[16]}: element j's fifth bit is bit j of qh, element
// j + 16's is bit j + 16; w = (q - 16) d. Q5_1 {f16 d, m; u8 qh[4]; u8 qs[16]}: w = q d + m.
void DequantQ5(const uint8_t* b, bool with_min, float* y) {
  const float d = Half(b), m = with_min ? Half(b + 2) : 0.0f;
  const uint8_t* qh_bytes = b + (with_min ? 4 : 2);
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  const uint8_t* qs = qh_bytes + 4;
  const int offset = with_min ? 0 : 16;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0xF) | (((qh >> j) & 1) << 4);
    const int hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    if (with_min) {
      y[j] = static_cast<float>(lo) * d + m;
      y[j + 16] = static_cast<float>(hi) * d + m;
    } else {
      y[j] = static_cast<float>(lo - offset) * d;
      y[j + 16] = static_cast<float>(hi - offset) * d;
    }
  }
}
void DequantQ5_0(const uint8_t* b, float* y) { DequantQ5(b, false, y); }
void DequantQ5_1(const uint8_t* b, float* y) { DequantQ5(b, true, y); }

void DequantQ8_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

void DequantQ4_K(const uint8_t* b, float* y) {
  const float d = Half(b), dmin = Half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int run = 0; run < 4; ++run, q += 32, y += 64) {
    int sc, m;
    Q4KScaleMin(scales, 2 * run, &sc, &m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    Q4KScaleMin(scales, 2 * run + 1, &sc, &m);
    const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) {
      y[l] = d1 * static_cast<float>(q[l] & 0xF) - m1;
      y[l + 32] = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void DequantQ6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = Half(b + 208);
  for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, y += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
  }
}

// Puts code `q` of column c into Tessera's packing (low nibble = even column).
inline void Put(uint8_t* packed, int64_t c, int q) {
  uint8_t& byte = packed[c / 2];
  byte = (c & 1) ? static_cast<uint8_t>((byte & 0x0F) | (q << 4))
                 : static_cast<uint8_t>((byte & 0xF0) | q);
}

// scale * (q - zero) for a group whose offset is `offset` (w = scale * q + offset).
bool ZeroPoint(float scale, float offset, float* zero) {
  if (scale == 0.0f) {
    *zero = 0.0f;
    return offset == 0.0f;
  }
  *zero = -offset / scale;
  return true;
}

}  // namespace

bool GgmlDequantizable(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: case GgmlType::kF16: case GgmlType::kBF16: case GgmlType::kQ8_0:
    case GgmlType::kQ4_0: case GgmlType::kQ4_1: case GgmlType::kQ5_0: case GgmlType::kQ5_1:
    case GgmlType::kQ4_K: case GgmlType::kQ6_K:
      return true;
    default:
      return false;
  }
}

absl::Status GgmlReadable(GgmlType type) {
  if (GgmlDequantizable(type)) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat(
      GgmlTypeName(type), ", which Tessera does not read (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K and Q6_K)"));
}

absl::Status DequantizeGgml(GgmlType type, const uint8_t* src, int64_t n, float* dst) {
  const int block = GgmlBlockSize(type), bytes = GgmlTypeSize(type);
  RETURN_IF_ERROR(GgmlReadable(type));
  if (n % block != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(n, " elements are not whole ", GgmlTypeName(type), " blocks of ", block));
  }
  switch (type) {
    case GgmlType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return absl::OkStatus();
    case GgmlType::kF16: ConvertToF32(src, DType::kF16, static_cast<size_t>(n), dst); return absl::OkStatus();
    case GgmlType::kBF16: ConvertToF32(src, DType::kBF16, static_cast<size_t>(n), dst); return absl::OkStatus();
    default: break;
  }
  void (*decode)(const uint8_t*, float*) = nullptr;
  switch (type) {
    case GgmlType::kQ4_0: decode = DequantQ4_0; break;
    case GgmlType::kQ4_1: decode = DequantQ4_1; break;
    case GgmlType::kQ5_0: decode = DequantQ5_0; break;
    case GgmlType::kQ5_1: decode = DequantQ5_1; break;
    case GgmlType::kQ8_0: decode = DequantQ8_0; break;
    case GgmlType::kQ4_K: decode = DequantQ4_K; break;
    case GgmlType::kQ6_K: decode = DequantQ6_K; break;
    default: break;
  }
  for (int64_t i = 0; i < n / block; ++i) decode(src + i * bytes, dst + i * block);
  return absl::OkStatus();
}

bool GgmlMapsToInt8(GgmlType type) { return type == GgmlType::kQ8_0; }

void GgmlRowToInt8(GgmlType type, const uint8_t* row, int64_t cols, int8_t* codes,
                   float* scales) {
  (void)type;  // Q8_0 only (GgmlMapsToInt8).
  for (int64_t g = 0; g < cols / 32; ++g) {
    const uint8_t* b = row + g * 34;
    scales[g] = Half(b);
    std::memcpy(codes + g * 32, b + 2, 32);
  }
}

bool GgmlMapsToInt4(GgmlType type) {
  return type == GgmlType::kQ4_0 || type == GgmlType::kQ4_1 || type == GgmlType::kQ4_K;
}

bool GgmlRowToInt4(GgmlType type, const uint8_t* row, int64_t cols, uint8_t* packed,
                   float* scales, float* zeros) {
  bool ok = true;
  if (type == GgmlType::kQ4_0 || type == GgmlType::kQ4_1) {
    const int bytes = GgmlTypeSize(type);
    for (int64_t g = 0; g < cols / 32; ++g) {
      const uint8_t* b = row + g * bytes;
      const float d = Half(b);
      const uint8_t* qs = b + (type == GgmlType::kQ4_0 ? 2 : 4);
      scales[g] = d;
      if (type == GgmlType::kQ4_0) {
        zeros[g] = 8.0f;
      } else {
        ok &= ZeroPoint(d, Half(b + 2), &zeros[g]);
      }
      for (int j = 0; j < 16; ++j) {
        Put(packed, g * 32 + j, qs[j] & 0xF);
        Put(packed, g * 32 + j + 16, qs[j] >> 4);
      }
    }
    return ok;
  }
  // Q4_K: 256-element super-blocks of eight 32-element groups.
  for (int64_t s = 0; s < cols / 256; ++s) {
    const uint8_t* b = row + s * 144;
    const float d = Half(b), dmin = Half(b + 2);
    const uint8_t* q = b + 16;
    for (int run = 0; run < 4; ++run, q += 32) {
      for (int half = 0; half < 2; ++half) {
        const int64_t g = s * 8 + 2 * run + half;
        int sc, m;
        Q4KScaleMin(b + 4, 2 * run + half, &sc, &m);
        scales[g] = d * static_cast<float>(sc);
        ok &= ZeroPoint(scales[g], -(dmin * static_cast<float>(m)), &zeros[g]);
        for (int l = 0; l < 32; ++l) Put(packed, g * 32 + l, half == 0 ? (q[l] & 0xF) : (q[l] >> 4));
      }
    }
  }
  return ok;
}

}  // namespace tessera
