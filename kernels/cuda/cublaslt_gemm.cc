#include "kernels/cuda/cublaslt_gemm.h"

#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera::kernels {
namespace {

// Past this many cached plans (prefill chunks of many lengths), start over.
constexpr size_t kMaxPlans = 1024;

int AlignmentOf(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  int alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

cudaDataType_t CudaTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kF16: return CUDA_R_16F;
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kI8: return CUDA_R_8I;
    case DType::kF8E4M3: return CUDA_R_8F_E4M3;
    case DType::kI32: return CUDA_R_32I;
    case DType::kU4: break;  // Packed int4 has no cuBLAS type; never reaches here.
  }
  return CUDA_R_32F;
}

absl::Status LtError(const char* call, cublasStatus_t status, absl::string_view context) {
  return absl::InternalError(absl::StrCat(call, " failed (cuBLAS status ",
                                          static_cast<int>(status), ": ",
                                          cublasLtGetStatusString(status), ") for ", context));
}

}  // namespace

absl::StatusOr<std::unique_ptr<CublasLtGemm>> CublasLtGemm::Create(size_t workspace_bytes) {
  cublasLtHandle_t handle = nullptr;
  if (const cublasStatus_t s = cublasLtCreate(&handle); s != CUBLAS_STATUS_SUCCESS) {
    return LtError("cublasLtCreate", s, "the GEMM backend");
  }
  void* workspace = nullptr;
  if (workspace_bytes > 0) {
    if (const cudaError_t e = cudaMalloc(&workspace, workspace_bytes); e != cudaSuccess) {
      cudaGetLastError();
      cublasLtDestroy(handle);
      return absl::ResourceExhaustedError(absl::StrCat("cudaMalloc of the ", workspace_bytes,
                                                       "-byte cuBLASLt workspace failed: ",
                                                       cudaGetErrorString(e)));
    }
  }
  return std::unique_ptr<CublasLtGemm>(new CublasLtGemm(handle, workspace, workspace_bytes));
}

CublasLtGemm::~CublasLtGemm() {
  for (auto& [key, plan] : plans_) DestroyPlan(plan);
  if (workspace_ != nullptr) cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

void CublasLtGemm::DestroyPlan(Plan& plan) {
  if (plan.desc != nullptr) cublasLtMatmulDescDestroy(plan.desc);
  if (plan.w_layout != nullptr) cublasLtMatrixLayoutDestroy(plan.w_layout);
  if (plan.x_layout != nullptr) cublasLtMatrixLayoutDestroy(plan.x_layout);
  if (plan.y_layout != nullptr) cublasLtMatrixLayoutDestroy(plan.y_layout);
  plan = Plan{};
}

absl::StatusOr<const CublasLtGemm::Plan*> CublasLtGemm::GetPlan(const PlanKey& key) {
  if (auto it = plans_.find(key); it != plans_.end()) return &it->second;
  if (plans_.size() >= kMaxPlans) {
    for (auto& [k, plan] : plans_) DestroyPlan(plan);
    plans_.clear();
  }
  const auto [dtype_code, y_dtype_code, m, n, k, align_x, align_w, align_y] = key;
  const DType dtype = static_cast<DType>(dtype_code);
  const DType y_dtype = static_cast<DType>(y_dtype_code);
  const std::string context = absl::StrCat(DTypeName(dtype), " GEMM to ", DTypeName(y_dtype),
                                           " m=", m, " n=", n, " k=", k);
  const cudaDataType_t in_type = CudaTypeOf(dtype);

  // Row-major y[m, n] = x[m, k] w[n, k]^T is column-major y^T[n, m] = op(W)[n, k] x^T[k, m],
  // where W is stored column-major as [k, n] (ld k), so op = transpose; x^T is [k, m], ld k.
  Plan plan;
  cublasStatus_t s = cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (s != CUBLAS_STATUS_SUCCESS) return LtError("cublasLtMatmulDescCreate", s, context);
  const cublasOperation_t trans = CUBLAS_OP_T;
  const cublasOperation_t no_trans = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans));
  cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &no_trans,
                                 sizeof(no_trans));
  s = cublasLtMatrixLayoutCreate(&plan.w_layout, in_type, k, n, k);
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatrixLayoutCreate(&plan.x_layout, in_type, k, m, k);
  if (s == CUBLAS_STATUS_SUCCESS) {
    s = cublasLtMatrixLayoutCreate(&plan.y_layout, CudaTypeOf(y_dtype), n, m, n);
  }
  if (s != CUBLAS_STATUS_SUCCESS) {
    DestroyPlan(plan);
    return LtError("cublasLtMatrixLayoutCreate", s, context);
  }

  cublasLtMatmulPreference_t pref = nullptr;
  s = cublasLtMatmulPreferenceCreate(&pref);
  if (s != CUBLAS_STATUS_SUCCESS) {
    DestroyPlan(plan);
    return LtError("cublasLtMatmulPreferenceCreate", s, context);
  }
  const uint64_t ws = workspace_bytes_;
  const uint32_t ax = align_x, aw = align_w, ay = align_y;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof(ws));
  // Weights are often slices at arbitrary offsets: tell the heuristic the real alignment.
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aw,
                                       sizeof(aw));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ax,
                                       sizeof(ax));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ay,
                                       sizeof(ay));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ay,
                                       sizeof(ay));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  s = cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.w_layout, plan.x_layout,
                                     plan.y_layout, plan.y_layout, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS || found == 0) {
    DestroyPlan(plan);
    // NOT_SUPPORTED is how cuBLASLt 13 turns down some shapes rather than returning no
    // algorithm (FP8 with an output row of 130 floats, seen on an H200): the same answer,
    // and the caller's fallback is expected, so it is Unimplemented, not an error to log.
    if (s != CUBLAS_STATUS_SUCCESS && s != CUBLAS_STATUS_NOT_SUPPORTED) {
      return LtError("cublasLtMatmulAlgoGetHeuristic", s, context);
    }
    return absl::UnimplementedError(
        absl::StrCat("cuBLASLt has no algorithm for ", context, " (alignments x=", align_x,
                     " w=", align_w, " y=", align_y, ")"));
  }
  plan.algo = result.algo;
  return &plans_.emplace(key, plan).first->second;
}

absl::Status CublasLtGemm::Matmul(const void* x, const void* w, DType dtype, int64_t m,
                                  int64_t n, int64_t k, void* y, DType y_dtype,
                                  cudaStream_t stream) {
  if (y_dtype != DType::kF32 && !(y_dtype == DType::kBF16 && dtype == DType::kBF16)) {
    return absl::InvalidArgumentError(absl::StrCat("cuBLASLt GEMM: ", DTypeName(dtype),
                                                   " inputs to ", DTypeName(y_dtype),
                                                   " (F32, or BF16 from BF16 inputs)"));
  }
  const PlanKey key{static_cast<int>(dtype), static_cast<int>(y_dtype), m, n, k, AlignmentOf(x),
                    AlignmentOf(w), AlignmentOf(y)};
  absl::StatusOr<const Plan*> plan = GetPlan(key);
  if (!plan.ok()) return plan.status();
  const float alpha = 1.0f;
  const float beta = 0.0f;
  const cublasStatus_t s =
      cublasLtMatmul(handle_, (*plan)->desc, &alpha, w, (*plan)->w_layout, x, (*plan)->x_layout,
                     &beta, y, (*plan)->y_layout, y, (*plan)->y_layout, &(*plan)->algo,
                     workspace_, workspace_bytes_, stream);
  if (s != CUBLAS_STATUS_SUCCESS) {
    return LtError("cublasLtMatmul", s,
                   absl::StrCat(DTypeName(dtype), " GEMM m=", m, " n=", n, " k=", k));
  }
  return absl::OkStatus();
}

}  // namespace tessera::kernels
