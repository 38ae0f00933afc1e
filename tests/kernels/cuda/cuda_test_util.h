#ifndef TESSERA_TESTS_KERNELS_CUDA_CUDA_TEST_UTIL_H_
#define TESSERA_TESTS_KERNELS_CUDA_CUDA_TEST_UTIL_H_

#include <cuda_runtime.h>

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

// ExpectAllClose's rtol for a quantized-weight GEMM of m rows against the CPU backend.
// m <= 8 (fused GEMV): both sides decode the same codes exactly and accumulate in float32,
// only in another order (and int4 applies the group scale to a 32-column partial sum rather
// than to each weight): a few ulps of sqrt(k) * rms, far below 1e-4 for k <= 4096.
// m > 8: every weight is rounded once to BF16 (scale folded in) and so is every
// activation, each a relative error up to 2^-9 (~0.2%) that averages out over k, so the
// result is off by ~0.3% of rms; 1e-2 leaves three times that.
inline double QuantizedGemmTolerance(int64_t m) {
  return m > gpu::kQuantizedGemvMaxRows ? 1e-2 : 1e-4;
}

// Fixture: a CUDA backend on device 0 and the CPU reference; skips without a device.
class CudaVsCpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = NoDeviceReason();
    if (!why.empty()) GTEST_SKIP() << "no CUDA device, skipping GPU test: " << why;
    absl::StatusOr<std::unique_ptr<CudaBackend>> backend = MakeCudaBackend(0);
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

}  // namespace tessera::kernels::cuda_testing

#endif  // TESSERA_TESTS_KERNELS_CUDA_CUDA_TEST_UTIL_H_
