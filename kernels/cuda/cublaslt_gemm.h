#ifndef TESSERA_KERNELS_CUDA_CUBLASLT_GEMM_H_
#define TESSERA_KERNELS_CUDA_CUBLASLT_GEMM_H_

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/dtype.h"

namespace tessera::kernels {

// y[m, n] = x[m, k] * w[n, k]^T through cuBLASLt, both inputs row-major of the same dtype,
// y float32 or (from BF16 inputs) BF16, `y_dtype`. F32 uses CUBLAS_COMPUTE_32F without
// TF32, so it matches the CPU to float rounding; BF16/F16 inputs accumulate in float32 and
// round once to y's dtype. F8_E4M3 inputs
// (sm_89+, k % 16 == 0, 16-byte aligned; otherwise no algorithm, UNIMPLEMENTED) use the
// FP8 tensor cores with their precise (not fast) accumulation and no scales of their own.
// Plans (descriptors + heuristic algorithm) are cached per shape, dtype and pointer
// alignment, since a decode step issues the same few shapes hundreds of times.
// Not thread-safe: one per backend, used from the backend's thread.
class CublasLtGemm {
 public:
  static absl::StatusOr<std::unique_ptr<CublasLtGemm>> Create(size_t workspace_bytes);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  absl::Status Matmul(const void* x, const void* w, DType dtype, int64_t m, int64_t n,
                      int64_t k, void* y, DType y_dtype, cudaStream_t stream);

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t w_layout = nullptr;
    cublasLtMatrixLayout_t x_layout = nullptr;
    cublasLtMatrixLayout_t y_layout = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  // dtype, y dtype, m, n, k, alignment of x, w, y.
  using PlanKey = std::tuple<int, int, int64_t, int64_t, int64_t, int, int, int>;

  CublasLtGemm(cublasLtHandle_t handle, void* workspace, size_t workspace_bytes)
      : handle_(handle), workspace_(workspace), workspace_bytes_(workspace_bytes) {}
  absl::StatusOr<const Plan*> GetPlan(const PlanKey& key);
  static void DestroyPlan(Plan& plan);

  cublasLtHandle_t handle_;
  void* workspace_;
  size_t workspace_bytes_;
  std::map<PlanKey, Plan> plans_;
};

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CUDA_CUBLASLT_GEMM_H_
