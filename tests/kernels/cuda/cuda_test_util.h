#ifndef TESSERA_TESTS_KERNELS_CUDA_CUDA_TEST_UTIL_H_
#define TESSERA_TESTS_KERNELS_CUDA_CUDA_TEST_UTIL_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/launchers.h"

// Helpers for the CUDA-vs-CPU kernel tests: device detection, device arrays, seeded data,
// and a relative comparison.
namespace tessera::kernels::cuda_testing {

// Empty when a device is usable, else why not.
inline std::string NoDeviceReason() {
  absl::StatusOr<int> count = CudaDeviceCount();
  if (!count.ok()) return std::string(count.status().message());
  if (*count == 0) return "cudaGetDeviceCount reported 0 devices";
  return "";
}

// A device buffer filled from / read back to host vectors with plain synchronous copies.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    EXPECT_EQ(cudaMalloc(&ptr_, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    EXPECT_EQ(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
    // Pageable uploads may still be in flight when cudaMemcpy returns; the backend's stream
    // does not order against the legacy stream.
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return ptr_; }
  // Call after the producing stream was synchronised.
  std::vector<T> ToHost() const {
    std::vector<T> out(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(out.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return out;
  }

 private:
  T* ptr_ = nullptr;
  size_t n_;
};

inline std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo = -1.0f,
                                       float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// `n` random floats stored as `dtype` (the bytes both backends read).
inline std::vector<uint8_t> RandomWeights(size_t n, DType dtype, uint32_t seed) {
  const std::vector<float> values = RandomFloats(n, seed);
  std::vector<uint8_t> bytes(std::max<size_t>(n, 1) * DTypeSize(dtype));
  ConvertFromF32(values.data(), n, dtype, bytes.data());
  return bytes;
}

// Random int8 or FP8 E4M3 weight bytes, [n, k] (no FP8 NaN codes), with their scales: one
// per row, or per (row, group of `group` columns) when group > 0, near 2^-9 so products stay
// in range. The same seed gives the same weights in every test.
struct QuantizedWeights {
  std::vector<uint8_t> bytes;
  std::vector<float> scales;
};
inline QuantizedWeights RandomQuantizedWeights(DType dtype, int64_t n, int64_t k, int group,
                                               uint32_t seed) {
  std::mt19937 rng(seed);
  QuantizedWeights w;
  w.bytes.resize(n * k);
  for (uint8_t& b : w.bytes) {
    do {
      b = static_cast<uint8_t>(rng());
    } while (dtype == DType::kF8E4M3 && (b & 0x7f) == 0x7f);  // No NaN codes.
  }
  const int64_t groups = group > 0 ? (k + group - 1) / group : 1;
  w.scales.resize(n * groups);
  for (size_t i = 0; i < w.scales.size(); ++i) w.scales[i] = std::ldexp(1.0f + (i % 7) * 0.1f, -9);
  return w;
}

// Element-wise |actual - expected| <= rtol * (|expected| + rms(expected)) + 1e-6: relative,
// but values near zero (cancellation) are judged against the typical magnitude.
inline void ExpectAllClose(const std::vector<float>& actual, const std::vector<float>& expected,
                           double rtol, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double sum_sq = 0.0;
  for (float e : expected) sum_sq += static_cast<double>(e) * e;
  const double rms = expected.empty() ? 0.0 : std::sqrt(sum_sq / expected.size());
  int reported = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double tol = rtol * (std::fabs(expected[i]) + rms) + 1e-6;
    const double diff = std::fabs(static_cast<double>(actual[i]) - expected[i]);
    if (!(diff <= tol)) {  // Also catches NaN.
      ADD_FAILURE() << what << ": element " << i << " is " << actual[i] << ", expected "
                    << expected[i] << " (tolerance " << tol << ")";
      if (++reported >= 10) return;
    }
  }
}

// Dequantized weights [n, k] in float32: code value times its scale (one per row and
// `group` columns; group 0: one per row), the product the CUDA kernels form before
// rounding it to BF16 for the prefill GEMM.
inline std::vector<float> DequantizedWeights(DType dtype, const QuantizedWeights& w, int64_t n,
                                             int64_t k, int group) {
  const int64_t columns = group > 0 ? group : k;
  const int64_t groups = (k + columns - 1) / columns;
  std::vector<float> out(n * k);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const uint8_t b = w.bytes[r * k + c];
      const float v = dtype == DType::kI8 ? static_cast<float>(static_cast<int8_t>(b))
                                          : Fp8E4M3ToF32(b);
      out[r * k + c] = w.scales[r * groups + c / columns] * v;
    }
  }
  return out;
}

// The prefill path for quantized weights (m > gpu::kQuantizedGemvMaxRows) on the host: the
// dequantized weights and the activations each rounded once to BF16, then a float32-
// accumulated GEMM (the CPU backend's BF16 GEMM). The device differs only in summation
// order, so kQuantizedGemmTolerance holds for both paths. (Against the float32 GEMM the two
// roundings put the largest error over a few thousand outputs near 1 % of the rms.)
inline std::vector<float> WidenedBf16Gemm(Backend& cpu, const std::vector<float>& x, int64_t m,
                                          const std::vector<float>& dequantized, int64_t n,
                                          int64_t k) {
  std::vector<uint16_t> w(dequantized.size());
  for (size_t i = 0; i < w.size(); ++i) w[i] = F32ToBf16(dequantized[i]);
  std::vector<float> rounded(x.size());
  for (size_t i = 0; i < x.size(); ++i) rounded[i] = Bf16ToF32(F32ToBf16(x[i]));
  std::vector<float> y(m * n);
  cpu.Gemm(rounded.data(), m, MatrixView{w.data(), DType::kBF16, n, k}, y.data());
  return y;
}

// The FP8 x FP8 path (CudaBackend::set_fp8_activations) on the host: the activations
// quantized as kernels/cuda/fp8_activation_kernels.cu does (one scale for the tensor,
// amax / 448, each x / scale rounded to E4M3), multiplied in float32 by the same FP8 weights
// and their row scales, times the activation scale. The device differs in summation order
// and in where the two scales meet the sum. (Against the float activations the E4M3
// rounding alone puts the largest error over thousands of outputs at 7-15 % of the rms.)
inline std::vector<float> Fp8GemmReference(Backend& cpu, const std::vector<float>& x, int64_t m,
                                           const MatrixView& host_w) {
  float amax = 0.0f;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float scale = amax > 0.0f ? amax / kFp8E4M3Max : 1.0f;
  const float inv = 1.0f / scale;
  std::vector<float> codes(x.size());
  for (size_t i = 0; i < x.size(); ++i) codes[i] = Fp8E4M3ToF32(F32ToFp8E4M3(x[i] * inv));
  std::vector<float> y(m * host_w.rows);
  cpu.Gemm(codes.data(), m, host_w, y.data());
  for (float& v : y) v *= scale;
  return y;
}

// ExpectAllClose's rtol for Fp8GemmReference with a float32 output.
constexpr double kFp8GemmTolerance = 1e-3;

// ExpectAllClose's rtol for a quantized-weight GEMM against its host model (the CPU
// backend for the fused GEMV, m <= 8; WidenedBf16Gemm above it): both sides decode the same
// codes exactly and accumulate in float32, only in another order (and int4 applies the
// group scale to a 32-column partial sum rather than to each weight): a few ulps of
// sqrt(k) * rms, far below 1e-4 for k <= 4096.
constexpr double kQuantizedGemmTolerance = 1e-4;

// Fixture: a CUDA backend on device 0 and the CPU reference; skips without a device. The
// CUDA backend's activations are float32 (kActivations), so the exact twin tests feed both
// backends the same float buffers; CudaBf16VsCpuTest below runs the BF16 path.
class CudaVsCpuTest : public ::testing::Test {
 protected:
  static constexpr DType kActivations = DType::kF32;
  void SetUp() override { Create(kActivations); }
  void Create(DType activations) {
    const std::string why = NoDeviceReason();
    if (!why.empty()) GTEST_SKIP() << "no CUDA device, skipping GPU test: " << why;
    absl::StatusOr<std::unique_ptr<CudaBackend>> backend = MakeCudaBackend(0, activations);
    ASSERT_TRUE(backend.ok()) << backend.status();
    cuda_ = *std::move(backend);
    cpu_ = MakeCpuBackend(2);
  }
  void TearDown() override {
    if (cuda_ != nullptr) {
      cuda_->Synchronize();
      EXPECT_TRUE(cuda_->status().ok()) << cuda_->status();
    }
  }

  std::unique_ptr<CudaBackend> cuda_;
  std::unique_ptr<Backend> cpu_;
};

// ---- BF16 activations (the CUDA backend's default).
inline uint16_t ToBf16Bits(float f) { return F32ToBf16(f); }

// Each value rounded to BF16 (round to nearest even), as floats: the inputs both sides see.
inline std::vector<float> RoundedToBf16(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Bf16ToF32(F32ToBf16(v[i]));
  return out;
}
inline std::vector<uint16_t> Bf16Bits(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = F32ToBf16(v[i]);
  return out;
}
inline std::vector<float> Bf16Values(const std::vector<uint16_t>& bits) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = Bf16ToF32(bits[i]);
  return out;
}

// The relative tolerance for an op whose output is rounded once to BF16 (2^-9 relative)
// after float32 arithmetic on the same BF16-rounded inputs the CPU widened: rounding alone
// is within half a BF16 ulp, 2^-9 of |value|; 1e-2 leaves room for one more rounding of an
// intermediate (GEMM inputs converted, attention's BF16 q and P on the tensor cores).
constexpr double kBf16Tolerance = 1e-2;

// The tensor-core attention kernel rounds Q and the softmax weights P to BF16 for the
// matrix units. An output is a weighted mean of V rows, far smaller than its terms, so those
// roundings weigh more than in an elementwise op: a float64 model of a correct kernel
// (tests/kernels/cuda/bf16_attention_error.py) puts the largest error over the test shapes'
// ~10^5 outputs at 0.9-1.3e-2 of (|expected| + rms), with an rms of 1.4e-3; an H200 gave
// up to 1.35e-2 where the output is rounded to BF16 as well. 2e-2 clears that; a wrong
// mask, scale or row is off by O(1).
constexpr double kBf16AttentionTolerance = 2e-2;

// Fixture: the CUDA backend with BF16 activations against the CPU backend (float32) on
// the same BF16-rounded inputs, widened.
class CudaBf16VsCpuTest : public CudaVsCpuTest {
 protected:
  void SetUp() override { Create(DType::kBF16); }
};

}  // namespace tessera::kernels::cuda_testing

#endif  // TESSERA_TESTS_KERNELS_CUDA_CUDA_TEST_UTIL_H_
