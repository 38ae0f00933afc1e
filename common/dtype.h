#ifndef TESSERA_COMMON_DTYPE_H_
#define TESSERA_COMMON_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

// Element types a checkpoint may hold. Kept free of Abseil so CUDA code can include it.
namespace tessera {

enum class DType : uint8_t { kF32, kF16, kBF16 };

constexpr size_t DTypeSize(DType t) { return t == DType::kF32 ? 4 : 2; }

constexpr const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
  }
  return "?";
}

// Parses the safetensors spelling ("F32", "F16", "BF16"); false for anything else.
inline bool ParseDType(std::string_view s, DType* out) {
  if (s == "F32") { *out = DType::kF32; return true; }
  if (s == "F16") { *out = DType::kF16; return true; }
  if (s == "BF16") { *out = DType::kBF16; return true; }
  return false;
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
  }
}

}  // namespace tessera

#endif  // TESSERA_COMMON_DTYPE_H_
