#ifndef TESSERA_KERNELS_CUDA_QUANTIZED_VALUE_H_
#define TESSERA_KERNELS_CUDA_QUANTIZED_VALUE_H_

#include <cstdint>
#include <cstring>

// Decoding of weight-only quantized bytes (before their row scale), shared by the CUDA
// kernels and the host tests that check them against common/dtype.h's Fp8E4M3ToF32.
#if defined(__CUDACC__)
#define TESSERA_QUANT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TESSERA_QUANT_HOST_DEVICE inline
#endif

namespace tessera::kernels::quantized {

TESSERA_QUANT_HOST_DEVICE float Int8Value(uint8_t b) {
  return static_cast<float>(static_cast<int8_t>(b));
}

// OCP E4M3 (bias 7, no infinities, S.1111.111 is NaN). Built from the float32 bits so the
// device and host agree bit for bit: normals move their exponent to bias 127, subnormals
// are m * 2^-9.
TESSERA_QUANT_HOST_DEVICE float Fp8E4M3Value(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exponent = (b >> 3) & 0xfu;
  const uint32_t mantissa = b & 0x7u;
  uint32_t bits;
  if (exponent == 0xf && mantissa == 0x7) {
    bits = sign | 0x7fc00000u;
  } else if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * (1.0f / 512.0f);
    memcpy(&bits, &magnitude, sizeof(bits));
    bits |= sign;
  } else {
    bits = sign | ((exponent + 120u) << 23) | (mantissa << 20);
  }
  float value;
  memcpy(&value, &bits, sizeof(value));
  return value;
}

}  // namespace tessera::kernels::quantized

#endif  // TESSERA_KERNELS_CUDA_QUANTIZED_VALUE_H_
