#ifndef TESSERA_COMMON_DTYPE_H_
#define TESSERA_COMMON_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

// Element types a checkpoint may hold. Kept free of Abseil so CUDA code can include it.
namespace tessera {

// kI8 and kF8E4M3 hold quantized weights (their scales travel beside them, see
// kernels::MatrixView) or an FP8 KV cache; read on their own they are the raw values.
// kI32 appears only in files (GPTQ/AWQ packed int4 words, g_idx). kU4 is Tessera's own
// packed 4-bit weight: two unsigned values per byte, the low nibble holding the even
// column; it never appears in a file and has no whole-byte size (see DTypeBytes).
enum class DType : uint8_t { kF32, kF16, kBF16, kI8, kF8E4M3, kI32, kU4 };

// Bytes per element; 0 for kU4, whose elements are half a byte: code that may see kU4
// sizes buffers with DTypeBytes instead.
constexpr size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kI32:
    case DType::kF32: return 4;
    case DType::kF16:
    case DType::kBF16: return 2;
    case DType::kI8:
    case DType::kF8E4M3: return 1;
    case DType::kU4: return 0;
  }
  return 0;
}

// Bytes that `n` consecutive elements of type `t` occupy (an odd kU4 count rounds up).
constexpr size_t DTypeBytes(DType t, size_t n) {
  return t == DType::kU4 ? (n + 1) / 2 : n * DTypeSize(t);
}

constexpr const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kI8: return "I8";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kI32: return "I32";
    case DType::kU4: return "U4";
  }
  return "?";
}

// Parses the safetensors spelling ("F32", "F16", "BF16", "I8", "F8_E4M3", "I32"); false
// for anything else (kU4 is in-memory only).
inline bool ParseDType(std::string_view s, DType* out) {
  if (s == "F32") { *out = DType::kF32; return true; }
  if (s == "F16") { *out = DType::kF16; return true; }
  if (s == "BF16") { *out = DType::kBF16; return true; }
  if (s == "I8") { *out = DType::kI8; return true; }
  if (s == "F8_E4M3") { *out = DType::kF8E4M3; return true; }
  if (s == "I32") { *out = DType::kI32; return true; }
  return false;
}

// Bytes of the float scale an FP8 KV cache keeps per (token, head); 0 for other types.
constexpr size_t KvScaleBytes(DType dtype) { return dtype == DType::kF8E4M3 ? 4 : 0; }

// OCP FP8 E4M3 ("fn": no infinities, 0x7f/0xff are NaN, largest finite 448).
constexpr float kFp8E4M3Max = 448.0f;

inline float Fp8E4M3ToF32(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xfu;
  const uint32_t mant = b & 0x7u;
  uint32_t bits;
  if (exp == 0xfu && mant == 0x7u) {
    bits = sign | 0x7fc00000u;
  } else if (exp == 0) {  // Subnormal: mant * 2^-9.
    const float v = static_cast<float>(mant) * (1.0f / 512.0f);
    std::memcpy(&bits, &v, 4);
    bits |= sign;
  } else {
    bits = sign | ((exp + 127 - 7) << 23) | (mant << 20);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even; magnitudes above 448 saturate to 448 (as torch's scaled casts
// do after clamping), NaN stays NaN.
inline uint8_t F32ToFp8E4M3(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7fu;
  float a;
  std::memcpy(&a, &abs, 4);
  if (a >= kFp8E4M3Max) return sign | 0x7eu;
  if (a < 0.015625f) {  // Below the smallest normal 2^-6: steps of 2^-9.
    const float q = a * 512.0f;
    uint32_t m = static_cast<uint32_t>(q);
    const float rem = q - static_cast<float>(m);
    if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
    return sign | static_cast<uint8_t>(m);  // m == 8 is the smallest normal, 0x08.
  }
  // Normal: keep 3 mantissa bits, rounding the 20 dropped ones to nearest even.
  uint32_t rounded = abs + 0x7ffffu + ((abs >> 20) & 1u);
  const uint32_t exp = (rounded >> 23) - 127 + 7;
  const uint32_t mant = (rounded >> 20) & 0x7u;
  const uint32_t out = (exp << 3) | mant;
  return sign | static_cast<uint8_t>(out > 0x7eu ? 0x7eu : out);
}

inline float Bf16ToF32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, NaN kept quiet.
inline uint16_t F32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // Subnormal: renormalise.
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) { mant <<= 1; --exp; }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t F32ToF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;            // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;           // Overflow to inf.
  if (abs < 0x38800000u) {                                  // Subnormal or zero.
    if (abs < 0x33000000u) return sign;
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // Half subnormal: value = m * 2^-24.
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    uint32_t result = mant >> shift;
    if (rem > halfway || (rem == halfway && (result & 1u))) ++result;
    return sign | static_cast<uint16_t>(result);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return sign | static_cast<uint16_t>((rounded - (112u << 23)) >> 13);
}

// Converts `n` elements of `src` (of type `t`) to float.
inline void ConvertToF32(const void* src, DType t, size_t n, float* dst) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = Bf16ToF32(s[i]);
      return;
    }
    case DType::kF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = F16ToF32(s[i]);
      return;
    }
    case DType::kI8: {
      const auto* s = static_cast<const int8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
    case DType::kF8E4M3: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = Fp8E4M3ToF32(s[i]);
      return;
    }
    case DType::kI32: {
      const auto* s = static_cast<const int32_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
    case DType::kU4: {  // The raw 0..15 codes, low nibble first.
      const auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>((s[i / 2] >> (4 * (i & 1))) & 0xf);
      return;
    }
  }
}

// Converts `n` floats to type `t`.
inline void ConvertFromF32(const float* src, size_t n, DType t, void* dst) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::kBF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = F32ToBf16(src[i]);
      return;
    }
    case DType::kF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = F32ToF16(src[i]);
      return;
    }
    case DType::kI8: {  // Saturating round to nearest (the caller scaled the values).
      auto* d = static_cast<int8_t*>(dst);
      for (size_t i = 0; i < n; ++i) {
        const float v = src[i] < -127.0f ? -127.0f : (src[i] > 127.0f ? 127.0f : src[i]);
        d[i] = static_cast<int8_t>(__builtin_nearbyintf(v));
      }
      return;
    }
    case DType::kF8E4M3: {
      auto* d = static_cast<uint8_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = F32ToFp8E4M3(src[i]);
      return;
    }
    case DType::kI32: {  // Round to nearest; the values are integers in practice.
      auto* d = static_cast<int32_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = static_cast<int32_t>(__builtin_nearbyintf(src[i]));
      return;
    }
    case DType::kU4: {  // Saturating to 0..15, two codes a byte.
      auto* d = static_cast<uint8_t*>(dst);
      for (size_t i = 0; i < n; ++i) {
        const float v = src[i] < 0.0f ? 0.0f : (src[i] > 15.0f ? 15.0f : src[i]);
        const uint8_t q = static_cast<uint8_t>(__builtin_nearbyintf(v));
        if (i & 1) {
          d[i / 2] = static_cast<uint8_t>((d[i / 2] & 0x0f) | (q << 4));
        } else {
          d[i / 2] = q;
        }
      }
      return;
    }
  }
}

}  // namespace tessera

#endif  // TESSERA_COMMON_DTYPE_H_
