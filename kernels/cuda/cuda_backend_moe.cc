// CudaBackend's Qwen3 and mixture-of-experts ops: launches, and the per-layer device
// tables of expert weight pointers that let the expert kernels follow device-side routing.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_backend.h"

namespace tessera::kernels {
namespace {

bool SameView(const MatrixView& a, const MatrixView& b) {
  return a.data == b.data && a.dtype == b.dtype && a.rows == b.rows && a.cols == b.cols &&
         a.scales == b.scales && a.group_size == b.group_size && a.zeros == b.zeros &&
         a.layout == b.layout;
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void CudaBackend::HeadRmsNorm(void* x, int n, int row_stride, int num_heads, int head_dim,
                              const float* weight, float eps) {
  std::string error;
  RecordLaunch(gpu::LaunchHeadRmsNorm(x, n, row_stride, num_heads, head_dim, weight, eps,
                                      stream_, &error, activation_dtype_),
               error);
}

void CudaBackend::MoeRoute(const float* router_logits, int n, int num_experts, int top_k,
                           bool renormalize, int32_t* expert_ids, float* weights) {
  std::string error;
  RecordLaunch(gpu::LaunchMoeRoute(router_logits, n, num_experts, top_k, renormalize,
                                   expert_ids, weights, stream_, &error),
               error);
}

void CudaBackend::AddSigmoidGated(void* y, const void* x, const float* gate_logits, int n,
                                  int dim) {
  std::string error;
  RecordLaunch(gpu::LaunchAddSigmoidGated(y, x, gate_logits, n, dim, stream_, &error,
                                          activation_dtype_),
               error);
}

const gpu::MoeExpertsArgs* CudaBackend::ExpertTable(const ExpertWeights& experts, int hidden) {
  const int num_local = experts.num_local;
  auto found = expert_tables_.find(experts.gate_up);
  if (found != expert_tables_.end()) {
    const ExpertTableEntry& entry = found->second;
    bool same = static_cast<int>(entry.gate_up.size()) == num_local &&
                entry.args.first_expert == experts.first_expert &&
                entry.args.intermediate == experts.intermediate && entry.args.hidden == hidden;
    for (int e = 0; same && e < num_local; ++e) {
      same = SameView(entry.gate_up[e], experts.gate_up[e]) &&
             SameView(entry.down[e], experts.down[e]);
    }
    if (same) return &entry.args;
  }
  if (capturing_) {
    Record(absl::FailedPreconditionError(
        "MoeExperts: uploading a layer's expert table while capturing a graph (run the step "
        "once eagerly first)"));
    return nullptr;
  }
  if (experts.gate_up != nullptr && !gpu::MoeExpertDtypeSupported(experts.gate_up[0].dtype)) {
    Record(absl::UnimplementedError(absl::StrCat(
        "MoeExperts: expert weight dtype ", DTypeName(experts.gate_up[0].dtype),
        " is not implemented on CUDA (F32, BF16, F16, I8 or F8_E4M3)")));
    return nullptr;
  }
  std::string error;
  if (!gpu::CheckMoeExperts(experts, hidden, &error)) {
    Record(absl::InvalidArgumentError(error));
    return nullptr;
  }
  if (num_local > gpu::kMoeMaxExperts) {
    Record(absl::InvalidArgumentError(absl::StrCat("MoeExperts: ", num_local,
                                                   " held experts, at most ",
                                                   gpu::kMoeMaxExperts)));
    return nullptr;
  }

  const DType dtype = experts.gate_up[0].dtype;
  const bool quantized = dtype == DType::kI8 || dtype == DType::kF8E4M3;
  std::vector<gpu::MoeExpertPointers> pointers(num_local);
  bool aligned = true;
  for (int e = 0; e < num_local; ++e) {
    const MatrixView& gate_up = experts.gate_up[e];
    const MatrixView& down = experts.down[e];
    // Scales only where the dtype has them: the kernels take a non-null pointer as scaled.
    pointers[e] = {gate_up.data, quantized ? gate_up.scales : nullptr, down.data,
                   quantized ? down.scales : nullptr};
    aligned = aligned && Aligned16(gate_up.data) && Aligned16(down.data);
  }
  const size_t bytes = pointers.size() * sizeof(gpu::MoeExpertPointers);
  const bool known = found != expert_tables_.end();
  ExpertTableEntry& entry = expert_tables_[experts.gate_up];
  // Graphs bake in the table pointer and the args: any change makes them stale.
  if (known) ++graph_epoch_;
  if (entry.device != nullptr && entry.gate_up.size() != pointers.size()) {
    RecordCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");  // Still in use?
    cudaFree(entry.device);
    entry.device = nullptr;
  }
  if (entry.device == nullptr) {
    if (const cudaError_t e = cudaMalloc(&entry.device, bytes); e != cudaSuccess) {
      cudaGetLastError();
      expert_tables_.erase(experts.gate_up);
      Record(absl::ResourceExhaustedError(absl::StrCat(
          "cudaMalloc of ", bytes, " bytes for a MoE expert table failed: ",
          cudaGetErrorString(e))));
      return nullptr;
    }
  }
  // Once per layer: wait for the copy so `pointers` may go.
  RecordCuda(cudaMemcpyAsync(entry.device, pointers.data(), bytes, cudaMemcpyHostToDevice,
                             stream_),
             "cudaMemcpyAsync of a MoE expert table");
  RecordCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize after a MoE expert table");
  entry.gate_up.assign(experts.gate_up, experts.gate_up + num_local);
  entry.down.assign(experts.down, experts.down + num_local);
  gpu::MoeExpertsArgs& args = entry.args;
  args.table = entry.device;
  args.first_expert = experts.first_expert;
  args.num_local = num_local;
  args.hidden = hidden;
  args.intermediate = experts.intermediate;
  args.weight_dtype = dtype;
  // Only int8 has grouped scales; FP8's are per row whatever group_size says.
  args.gate_up_group = dtype == DType::kI8 ? experts.gate_up[0].group_size : 0;
  args.down_group = dtype == DType::kI8 ? experts.down[0].group_size : 0;
  args.aligned = aligned;
  return &args;
}

void CudaBackend::MoeExperts(const void* x, int n, int hidden, const int32_t* expert_ids,
                             const float* weights, int top_k, const ExpertWeights& experts,
                             void* out) {
  if (n <= 0 || hidden <= 0) return;
  const DType act = activation_dtype_;
  if (experts.num_local <= 0 || top_k <= 0) {  // Nothing held here: the all-reduce fills in.
    RecordCuda(cudaMemsetAsync(out, 0, static_cast<size_t>(n) * hidden * DTypeSize(act),
                               stream_),
               "cudaMemsetAsync of MoE output");
    return;
  }
  const gpu::MoeExpertsArgs* args = ExpertTable(experts, hidden);
  if (args == nullptr) return;
  std::string error;
  const int64_t pairs = static_cast<int64_t>(n) * top_k;
  if (pairs <= moe_gemv_max_pairs_ && pairs <= 65535) {
    const size_t bytes = gpu::MoeExpertsGemvWorkspaceBytes(n, top_k, experts.intermediate);
    void* workspace = Ensure(moe_, bytes, "MoE expert activations");
    if (workspace == nullptr) return;
    RecordLaunch(gpu::LaunchMoeExpertsGemv(x, n, expert_ids, weights, top_k, *args, workspace,
                                           bytes, out, stream_, &error, act),
                 error);
    return;
  }
  const int chunk = gpu::MoeGroupedChunkTokens(n, top_k, hidden, experts.intermediate, act);
  const size_t bytes = gpu::MoeExpertsGroupedWorkspaceBytes(
      chunk, top_k, hidden, experts.intermediate, experts.num_local, act);
  void* workspace = Ensure(moe_, bytes, "MoE grouped GEMM workspace");
  if (workspace == nullptr) return;
  RecordLaunch(gpu::LaunchMoeExpertsGrouped(x, n, expert_ids, weights, top_k, *args, chunk,
                                            bf16_tensor_cores_, workspace, bytes, out, stream_,
                                            &error, act),
               error);
}

}  // namespace tessera::kernels
