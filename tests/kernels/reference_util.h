#ifndef TESSERA_TESTS_KERNELS_REFERENCE_UTIL_H_
#define TESSERA_TESTS_KERNELS_REFERENCE_UTIL_H_

#include <cstdint>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "kernels/cpu/simd.h"

// Helpers the CPU kernel tests share: seeded random data and weights stored in any dtype
// together with the exact float values the kernel must see.
namespace tessera::kernels::testing {

inline std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo = -1.0f,
                                       float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// A matrix stored as `dtype`, plus its values widened back to float (what a correct
// kernel multiplies with).
struct StoredMatrix {
  std::vector<uint8_t> bytes;
  std::vector<float> values;
};

inline StoredMatrix MakeStoredMatrix(size_t elements, DType dtype, uint32_t seed) {
  std::vector<float> source = RandomFloats(elements, seed);
  StoredMatrix out;
  out.bytes.resize(elements * DTypeSize(dtype) + 1);  // Never zero-sized.
  ConvertFromF32(source.data(), elements, dtype, out.bytes.data());
  out.values.resize(elements);
  ConvertToF32(out.bytes.data(), dtype, elements, out.values.data());
  return out;
}

// Code paths this CPU can run: scalar always, then each SIMD level up to the detected one.
inline std::vector<SimdLevel> SupportedLevels() {
  std::vector<SimdLevel> levels;
  for (int l = 0; l <= static_cast<int>(DetectSimdLevel()); ++l) {
    levels.push_back(static_cast<SimdLevel>(l));
  }
  return levels;
}

}  // namespace tessera::kernels::testing

#endif  // TESSERA_TESTS_KERNELS_REFERENCE_UTIL_H_
