// GEMM of the CUDA backend (GEMV kernel for m <= 8 with 16-bit weights, cuBLASLt otherwise)
// against the CPU backend.
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/launchers.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace tessera::kernels::cuda_testing {
namespace {

// F32 runs in true FP32; BF16/F16 paths round activations (cuBLASLt) or weights (all).
double ToleranceFor(DType dtype) { return dtype == DType::kF32 ? 1e-4 : 1e-2; }

struct GemmCase {
  int64_t m;
  int64_t n;  // Output features (weight rows).
  int64_t k;  // Input features (weight cols).
  DType dtype;
};

std::string CaseName(const GemmCase& c) {
  return std::string(DTypeName(c.dtype)) + " m=" + std::to_string(c.m) +
         " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k);
}

class CudaGemmTest : public CudaVsCpuTest {
 protected:
  // `offset` elements of padding before the weights and activations exercise unaligned
  // pointers (slices of a larger tensor).
  void Check(const GemmCase& c, int64_t offset = 0) {
    SCOPED_TRACE(CaseName(c) + " offset=" + std::to_string(offset));
    const size_t elem = DTypeSize(c.dtype);
    const std::vector<uint8_t> w = RandomWeights(c.n * c.k + offset, c.dtype, 21);
    const std::vector<float> x = RandomFloats(c.m * c.k + offset, 22);
    std::vector<float> expected(c.m * c.n);
    cpu_->Gemm(x.data() + offset, c.m, MatrixView{w.data() + offset * elem, c.dtype, c.n, c.k},
               expected.data());
    DeviceArray<uint8_t> d_w(w);
    DeviceArray<float> d_x(x), d_y(c.m * c.n);
    cuda_->Gemm(d_x.get() + offset, c.m,
                MatrixView{d_w.get() + offset * elem, c.dtype, c.n, c.k}, d_y.get());
    cuda_->Synchronize();
    ASSERT_TRUE(cuda_->status().ok()) << cuda_->status();
    ExpectAllClose(d_y.ToHost(), expected, ToleranceFor(c.dtype), "gemm");
  }
};

TEST_F(CudaGemmTest, AllDtypesAndBatchSizes) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t m : {1, 3, 17}) {
      // Awkward (k not a multiple of 8) and vector-friendly shapes.
      Check({m, 37, 100, dtype});
      Check({m, 64, 256, dtype});
      Check({m, 130, 1024, dtype});
    }
  }
}

TEST_F(CudaGemmTest, UnalignedSlices) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t m : {1, 17}) Check({m, 48, 256, dtype}, /*offset=*/1);
  }
}

// Every row count the GEMV kernel instantiates, on a decode-like shape.
TEST_F(CudaGemmTest, GemvEveryRowCount) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int64_t m = 1; m <= gpu::kGemvMaxRows; ++m) Check({m, 300, 4096, dtype});
  }
}

// Just past the GEMV limit takes the cuBLASLt path with rounded activations.
TEST_F(CudaGemmTest, FirstCublasBatchAfterGemv) {
  Check({gpu::kGemvMaxRows + 1, 300, 4096, DType::kBF16});
}

}  // namespace
}  // namespace tessera::kernels::cuda_testing
