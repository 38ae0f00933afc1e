#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tessera::kernels {
namespace {

bool IsQuantized(DType dtype) {
  return dtype == DType::kI8 || dtype == DType::kF8E4M3 || dtype == DType::kU4;
}

// 32 MiB: what cuBLASLt recommends on Hopper for its larger kernels.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

}  // namespace

absl::StatusOr<int> CudaDeviceCount() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // Not sticky; keep it out of later launch checks.
    return absl::UnavailableError(absl::StrCat("cudaGetDeviceCount failed: ",
                                               cudaGetErrorName(err), " (",
                                               cudaGetErrorString(err), ")"));
  }
  return count;
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(int device,
                                                                 DType activation_dtype) {
  if (activation_dtype != DType::kF32 && activation_dtype != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA activation dtype ",
                                                   DTypeName(activation_dtype),
                                                   " is not supported (F32 or BF16)"));
  }
  absl::StatusOr<int> count = CudaDeviceCount();
  if (!count.ok()) return count.status();
  if (device < 0 || device >= *count) {
    return absl::NotFoundError(absl::StrCat("CUDA device ", device, " does not exist (",
                                            *count, " device(s) visible)"));
  }
  if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("cudaSetDevice(", device,
                                            ") failed: ", cudaGetErrorString(e)));
  }
  cudaStream_t stream = nullptr;
  if (const cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("cudaStreamCreate on device ", device,
                                            " failed: ", cudaGetErrorString(e)));
  }
  absl::StatusOr<std::unique_ptr<CublasLtGemm>> gemm =
      CublasLtGemm::Create(kCublasWorkspaceBytes);
  if (!gemm.ok()) {
    cudaStreamDestroy(stream);
    return gemm.status();
  }
  int major = 0;
  int minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    major = minor = 0;  // Unknown: no FP8 tensor-core path.
  }
  const bool fp8_tensor_cores = major > 8 || (major == 8 && minor >= 9);
  std::unique_ptr<CudaBackend> backend(
      new CudaBackend(device, stream, *std::move(gemm), fp8_tensor_cores, major >= 8,
                      activation_dtype));
  backend->hopper_ = major == 9 && minor == 0;
  if (cudaDeviceGetAttribute(&backend->num_sms_, cudaDevAttrMultiProcessorCount, device) !=
      cudaSuccess) {
    cudaGetLastError();
    backend->hopper_ = false;  // The persistent kernel needs its CTA count.
  }
  if (const char* kind = std::getenv("TESSERA_CUDA_PREFILL_ATTENTION");
      kind != nullptr && std::string_view(kind) == "tc") {
    backend->prefill_attention_ = PrefillAttention::kTensorCore;
  }
  // The split-K kernel before the planner, for A/B runs (where it is compiled).
  if (const char* kind = std::getenv("TESSERA_CUDA_DECODE_ATTENTION");
      kind != nullptr && std::string_view(kind) == "v1") {
    backend->decode_v1_ = true;
  }
  return backend;
}

absl::StatusOr<std::unique_ptr<CudaBackend>> MakeCudaBackend(int device, DType activation_dtype) {
  return CudaBackend::Create(device, activation_dtype);
}

CudaBackend::~CudaBackend() {
  cudaStreamSynchronize(stream_);
  gemm_.reset();
  for (Scratch* s : {&activations_, &gemm_out_, &dequantized_, &attention_, &sampling_, &fp8_inputs_,
                     &penalized_, &sample_io_, &moe_, &sm90_schedule_, &sm90_pages_}) {
    if (s->data != nullptr) cudaFree(s->data);
  }
  for (auto& [key, table] : expert_tables_) cudaFree(table.device);
  if (staging_ != nullptr) cudaFreeHost(staging_);
  for (cudaGraphExec_t g : graphs_) cudaGraphExecDestroy(g);
  cudaStreamDestroy(stream_);
}

void CudaBackend::Record(absl::Status status) {
  if (status.ok()) return;
  if (capturing_) {  // Fails the capture, not the backend.
    if (capture_error_.ok()) capture_error_ = std::move(status);
    return;
  }
  if (!first_error_.ok()) return;
  std::fprintf(stderr, "tessera cuda backend (device %d): %s\n", device_,
               std::string(status.message()).c_str());
  first_error_ = std::move(status);
}

void CudaBackend::RecordLaunch(bool ok, const std::string& error) {
  if (!ok) Record(absl::InternalError(error));
}

void CudaBackend::RecordCuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  Record(absl::InternalError(absl::StrCat(what, " failed: ", cudaGetErrorName(err), " (",
                                          cudaGetErrorString(err), ")")));
}

void* CudaBackend::Ensure(Scratch& scratch, size_t bytes, const char* what) {
  if (bytes <= scratch.bytes) return scratch.data;
  if (capturing_) {
    Record(absl::FailedPreconditionError(absl::StrCat("growing ", what, " while capturing a graph")));
    return nullptr;
  }
  ++graph_epoch_;  // Graphs that baked in the old buffer must not replay.
  if (scratch.data != nullptr) {
    // Kernels queued on the stream may still read the old buffer.
    RecordCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    cudaFree(scratch.data);
    scratch = Scratch{};
  }
  const size_t grown = bytes + bytes / 2;
  if (const cudaError_t e = cudaMalloc(&scratch.data, grown); e != cudaSuccess) {
    cudaGetLastError();
    scratch = Scratch{};
    Record(absl::ResourceExhaustedError(
        absl::StrCat("cudaMalloc of ", grown, " bytes for ", what, " failed: ",
                     cudaGetErrorString(e))));
    return nullptr;
  }
  scratch.bytes = grown;
  return scratch.data;
}

void* CudaBackend::Allocate(size_t bytes) {
  void* ptr = nullptr;
  if (cudaMalloc(&ptr, bytes == 0 ? 1 : bytes) != cudaSuccess) {
    cudaGetLastError();  // Out of memory is reported by the nullptr, not later launches.
    return nullptr;
  }
  return ptr;
}

void CudaBackend::Free(void* ptr) {
  if (ptr != nullptr) RecordCuda(cudaFree(ptr), "cudaFree");
}

void CudaBackend::CopyToDevice(void* dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  if (capturing_) {
    Record(absl::FailedPreconditionError("a synchronous copy to the device while capturing a graph"));
    return;
  }
  RecordCuda(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_),
             "cudaMemcpyAsync host to device");
  // The caller may reuse host_src as soon as we return.
  RecordCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize after a copy to device");
  staged_ = 0;
}

void CudaBackend::CopyToDeviceAsync(void* dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  if (capturing_) {
    Record(absl::FailedPreconditionError("a staged copy to the device while capturing a graph"));
    return;
  }
  // Copies from pageable memory would wait for the stream; pinned ones run asynchronously.
  constexpr size_t kAlign = 256;
  const size_t padded = (bytes + kAlign - 1) / kAlign * kAlign;
  if (staged_ + padded > staging_bytes_) {
    // Earlier transfers may still read the staging area: let them finish before reuse.
    RecordCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize before restaging");
    staged_ = 0;
    if (padded > staging_bytes_) {
      if (staging_ != nullptr) cudaFreeHost(staging_);
      staging_ = nullptr;
      staging_bytes_ = 0;
      const size_t grown = std::max<size_t>(padded * 2, size_t{1} << 20);
      if (const cudaError_t e = cudaHostAlloc(&staging_, grown, cudaHostAllocDefault);
          e != cudaSuccess) {
        cudaGetLastError();
        staging_ = nullptr;
        CopyToDevice(dst, host_src, bytes);  // Pageable and synchronous, but correct.
        return;
      }
      staging_bytes_ = grown;
    }
  }
  void* slot = static_cast<char*>(staging_) + staged_;
  std::memcpy(slot, host_src, bytes);
  staged_ += padded;
  RecordCuda(cudaMemcpyAsync(dst, slot, bytes, cudaMemcpyHostToDevice, stream_),
             "cudaMemcpyAsync staged host to device");
}

void CudaBackend::CopyOnDevice(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  RecordCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_),
             "cudaMemcpyAsync device to device");
}

void CudaBackend::GatherRows(const void* src, const int32_t* rows, int n, size_t row_bytes,
                             void* dst) {
  std::string error;
  RecordLaunch(gpu::LaunchGatherRows(src, rows, n, row_bytes, dst, stream_, &error), error);
}

void CudaBackend::CopyToHost(void* host_dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (capturing_) {
    Record(absl::FailedPreconditionError("a copy to the host while capturing a graph"));
    return;
  }
  RecordCuda(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_),
             "cudaMemcpyAsync device to host");
  RecordCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize after a copy to host");
  staged_ = 0;  // The stream is idle: every staged transfer is done.
}

void CudaBackend::Synchronize() {
  if (capturing_) {
    Record(absl::FailedPreconditionError("synchronising while capturing a graph"));
    return;
  }
  RecordCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  staged_ = 0;
}

namespace {

// cudaMemGetInfo's {free, total} on the current device; {0, 0} when it fails.
std::pair<size_t, size_t> DeviceMemory() {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    cudaGetLastError();
    return {0, 0};
  }
  return {free_bytes, total_bytes};
}

}  // namespace

size_t CudaBackend::FreeMemoryBytes() const { return DeviceMemory().first; }

size_t CudaBackend::TotalMemoryBytes() const { return DeviceMemory().second; }

void CudaBackend::EmbeddingGather(const int32_t* ids, int n, MatrixView table,
                                  int64_t vocab_begin, float* out) {
  std::string error;
  RecordLaunch(gpu::LaunchEmbeddingGather(ids, n, table, vocab_begin, out, stream_, &error),
               error);
}

void CudaBackend::RmsNorm(const float* x, const float* weight, int n, int dim, float eps,
                          void* out) {
  std::string error;
  RecordLaunch(gpu::LaunchRmsNorm(x, weight, n, dim, eps, out, stream_, &error,
                                  activation_dtype_),
               error);
}

void CudaBackend::AddRmsNorm(float* hidden, const void* delta, const float* weight, int n,
                             int dim, float eps, void* out) {
  std::string error;
  RecordLaunch(gpu::LaunchAddRmsNorm(hidden, delta, weight, n, dim, eps, out, stream_, &error,
                                     activation_dtype_),
               error);
}

void CudaBackend::Gemm(const void* x, int64_t m, MatrixView w, void* y, DType y_dtype) {
  if (y_dtype != DType::kF32 && y_dtype != activation_dtype_) {
    Record(absl::InvalidArgumentError(absl::StrCat("Gemm: output dtype ", DTypeName(y_dtype),
                                                   " is neither F32 nor the activation dtype ",
                                                   DTypeName(activation_dtype_))));
    return;
  }
  if (m <= 0 || w.rows <= 0) return;
  const DType act = activation_dtype_;
  if (w.cols <= 0) {  // An empty sum (all-zero bits are 0 in F32 and BF16 alike).
    RecordCuda(cudaMemsetAsync(y, 0, static_cast<size_t>(m * w.rows) * DTypeSize(y_dtype),
                               stream_),
               "cudaMemsetAsync for a K=0 GEMM");
    return;
  }
  if (IsQuantized(w.dtype)) {
    std::string error;
    if (m <= gpu::kQuantizedGemvMaxRows) {
      // Decode is bound by weight bytes: read the quantized bytes once, nothing widened.
      RecordLaunch(gpu::LaunchQuantizedGemv(x, static_cast<int>(m), w, y, stream_, &error, act,
                                            y_dtype),
                   error);
      return;
    }
    if (!gpu::CheckQuantizedWeights(w, "Gemm", &error)) {
      RecordLaunch(false, error);
      return;
    }
    if (fp8_activations_ && fp8_tensor_cores_ && w.dtype == DType::kF8E4M3 &&
        GemmFp8Activations(x, m, w, y, y_dtype)) {
      return;
    }
    // Prefill is bound by the GEMM: widen to BF16 (scales folded in) for cuBLASLt.
    const size_t elements = static_cast<size_t>(w.rows * w.cols);
    void* widened = Ensure(dequantized_, elements * DTypeSize(DType::kBF16),
                           "dequantized GEMM weights");
    if (widened == nullptr) return;
    if (!gpu::LaunchDequantizeToBf16(w, widened, stream_, &error)) {
      RecordLaunch(false, error);
      return;
    }
    GemmDense(x, m, MatrixView{widened, DType::kBF16, w.rows, w.cols}, y, y_dtype);
    return;
  }
  if (w.dtype != DType::kF32 && m <= gemv_max_rows_) {
    std::string error;
    RecordLaunch(gpu::LaunchGemv(x, static_cast<int>(m), w, y, stream_, &error, act, y_dtype),
                 error);
    return;
  }
  GemmDense(x, m, w, y, y_dtype);
}

void CudaBackend::GemmDense(const void* x, int64_t m, const MatrixView& w, void* y,
                            DType y_dtype) {
  const DType act = activation_dtype_;
  std::string error;
  // cuBLASLt wants both operands in one dtype: BF16 activations meet BF16 weights as they
  // are; any other pairing converts the activations to the weight dtype in scratch.
  const void* lhs = x;
  if (w.dtype != act) {
    const size_t elements = static_cast<size_t>(m * w.cols);
    void* converted = Ensure(activations_, elements * DTypeSize(w.dtype), "GEMM activations");
    if (converted == nullptr) return;
    if (!gpu::LaunchConvert(x, act, elements, w.dtype, converted, stream_, &error)) {
      RecordLaunch(false, error);
      return;
    }
    lhs = converted;
  }
  // It writes F32, or BF16 from BF16 inputs; BF16 outputs of other inputs go through float32.
  const bool via_f32 = y_dtype != DType::kF32 && w.dtype != DType::kBF16;
  void* out = y;
  if (via_f32) {
    out = Ensure(gemm_out_, static_cast<size_t>(m * w.rows) * sizeof(float), "GEMM output");
    if (out == nullptr) return;
  }
  absl::Status status = gemm_->Matmul(lhs, w.data, w.dtype, m, w.rows, w.cols, out,
                                      via_f32 ? DType::kF32 : y_dtype, stream_);
  if (!status.ok() && w.dtype != DType::kF32) {
    // cuBLASLt has no kernel for this shape or alignment (a weight slice at an odd offset):
    // fall back to the GEMV kernel, 8 rows at a time. Slow, but correct.
    if (!absl::IsUnimplemented(status) && !warned_gemm_fallback_) {
      warned_gemm_fallback_ = true;
      std::fprintf(stderr, "tessera cuda backend: %s; using the GEMV fallback\n",
                   std::string(status.message()).c_str());
    }
    GemvRows(x, m, w, y, y_dtype);
    return;
  }
  if (!status.ok()) {
    Record(std::move(status));
    return;
  }
  if (via_f32) {
    RecordLaunch(gpu::LaunchConvert(out, DType::kF32, static_cast<size_t>(m * w.rows), y_dtype,
                                    y, stream_, &error),
                 error);
  }
}

void CudaBackend::GemvRows(const void* x, int64_t m, const MatrixView& w, void* y,
                           DType y_dtype) {
  const size_t x_row = static_cast<size_t>(w.cols) * DTypeSize(activation_dtype_);
  const size_t y_row = static_cast<size_t>(w.rows) * DTypeSize(y_dtype);
  for (int64_t row = 0; row < m; row += gpu::kGemvMaxRows) {
    const int rows = static_cast<int>(std::min<int64_t>(gpu::kGemvMaxRows, m - row));
    std::string error;
    if (!gpu::LaunchGemv(static_cast<const char*>(x) + row * x_row, rows, w,
                         static_cast<char*>(y) + row * y_row, stream_, &error,
                         activation_dtype_, y_dtype)) {
      RecordLaunch(false, error);
      return;
    }
  }
}

bool CudaBackend::GemmFp8Activations(const void* x, int64_t m, const MatrixView& w, void* y,
                                     DType y_dtype) {
  const size_t elements = static_cast<size_t>(m * w.cols);
  void* workspace = Ensure(fp8_inputs_, gpu::Fp8ActivationWorkspaceBytes(elements),
                           "FP8 GEMM activations");
  if (workspace == nullptr) return true;  // Recorded; nothing more to run.
  // The FP8 GEMM writes float32; a BF16 y gets it through scratch, rounded once when the
  // scales are applied.
  void* product = y;
  if (y_dtype != DType::kF32) {
    product = Ensure(gemm_out_, static_cast<size_t>(m * w.rows) * sizeof(float), "GEMM output");
    if (product == nullptr) return true;
  }
  std::string error;
  void* codes = nullptr;
  float* x_scale = nullptr;
  if (!gpu::LaunchQuantizeActivationsFp8(x, elements, workspace, &codes, &x_scale, stream_,
                                         &error, activation_dtype_)) {
    RecordLaunch(false, error);
    return true;
  }
  // cuBLASLt's own per-tensor scales would cover the activations but not the weights'
  // per-row scales, so both are applied in one pass over y afterwards.
  absl::Status status = gemm_->Matmul(codes, w.data, DType::kF8E4M3, m, w.rows, w.cols, product,
                                      DType::kF32, stream_);
  if (!status.ok()) {
    // No FP8 algorithm for this shape or alignment (cuBLASLt reports some of those as
    // errors, not as an empty heuristic): like the BF16 fallback below, take the next path.
    if (!absl::IsUnimplemented(status) && !warned_fp8_fallback_) {
      warned_fp8_fallback_ = true;
      std::fprintf(stderr, "tessera cuda backend: %s; using the BF16 GEMM\n",
                   std::string(status.message()).c_str());
    }
    return false;  // The quantized activations go unused.
  }
  RecordLaunch(gpu::LaunchScaleColumns(static_cast<const float*>(product), w.scales, x_scale, m,
                                       w.rows, y, stream_, &error, y_dtype),
               error);
  ++fp8_gemms_;
  return true;
}

void CudaBackend::Rope(void* qkv, int n, int row_stride, const int32_t* positions,
                       int num_q_heads, int num_kv_heads, int head_dim, const float* inv_freq,
                       float cos_sin_scale) {
  std::string error;
  RecordLaunch(gpu::LaunchRope(qkv, n, row_stride, positions, num_q_heads, num_kv_heads,
                               head_dim, inv_freq, cos_sin_scale, stream_, &error,
                               activation_dtype_),
               error);
}

void CudaBackend::AddBias(void* y, const float* bias, int n, int dim) {
  std::string error;
  RecordLaunch(gpu::LaunchAddBias(y, bias, n, dim, stream_, &error, activation_dtype_), error);
}

void CudaBackend::SiluMul(const void* gate_up, int n, int inter, void* out) {
  std::string error;
  RecordLaunch(gpu::LaunchSiluMul(gate_up, n, inter, out, stream_, &error, activation_dtype_),
               error);
}

void CudaBackend::WriteKvCache(const void* k, const void* v, int row_stride,
                               const int64_t* slots, int n, const KvCacheShape& shape,
                               void* k_cache, void* v_cache) {
  std::string error;
  RecordLaunch(gpu::LaunchWriteKvCache(k, v, row_stride, slots, n, shape, k_cache, v_cache,
                                       stream_, &error, activation_dtype_),
               error);
}

void CudaBackend::Add(void* y, const void* x, size_t n) {
  std::string error;
  RecordLaunch(gpu::LaunchAdd(y, x, n, stream_, &error, activation_dtype_), error);
}

absl::Status CudaBackend::SampleGreedy(const float* logits, int rows, int vocab,
                                       int32_t* tokens, float* logprobs) {
  std::string error;
  if (!gpu::LaunchArgmax(logits, rows, vocab, tokens, logprobs, stream_, &error)) {
    return absl::InvalidArgumentError(error);
  }
  if (const cudaError_t e = cudaStreamSynchronize(stream_); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("greedy sampling of ", rows, " rows failed: ",
                                            cudaGetErrorString(e)));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::Sample(const float* logits, int rows, int vocab,
                                 absl::Span<const gpu::SamplingRowParams> params,
                                 int32_t* tokens, float* logprobs) {
  if (params.size() != static_cast<size_t>(rows)) {
    return absl::InvalidArgumentError(absl::StrCat("Sample: ", params.size(),
                                                   " parameter rows for ", rows,
                                                   " logits rows"));
  }
  if (rows <= 0) return absl::OkStatus();
  const size_t bytes = params.size() * sizeof(gpu::SamplingRowParams);
  void* device_params = Ensure(sampling_, bytes, "sampling parameters");
  if (device_params == nullptr) return first_error_;
  if (const cudaError_t e = cudaMemcpyAsync(device_params, params.data(), bytes,
                                            cudaMemcpyHostToDevice, stream_);
      e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("copying sampling parameters failed: ",
                                            cudaGetErrorString(e)));
  }
  std::string error;
  if (!gpu::LaunchSample(logits, rows, vocab, static_cast<gpu::SamplingRowParams*>(device_params),
                         tokens, logprobs, stream_, &error)) {
    return absl::InvalidArgumentError(error);
  }
  if (const cudaError_t e = cudaStreamSynchronize(stream_); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("sampling of ", rows, " rows failed: ",
                                            cudaGetErrorString(e)));
  }
  return absl::OkStatus();
}

bool CudaBackend::SampleOnDevice(const float* logits, int vocab, const DeviceSamplingRow* rows,
                                 int num_rows, const int32_t* penalty_tokens,
                                 const int32_t* penalty_output_counts,
                                 size_t num_penalty_entries, int32_t* tokens, float* logprobs,
                                 std::string* error) {
  if (num_rows <= 0) return true;
  std::vector<gpu::SamplingRowParams> sample(num_rows);
  std::vector<gpu::PenaltyRowParams> penalty(num_rows);
  bool any_penalty = false;
  for (int r = 0; r < num_rows; ++r) {
    const DeviceSamplingRow& in = rows[r];
    sample[r] = {in.temperature, in.top_k, in.top_p, in.seed, in.min_p};
    penalty[r] = {in.repetition_penalty, in.presence_penalty, in.frequency_penalty,
                  in.penalty_begin, in.penalty_end};
    if (in.penalty_begin < 0 || in.penalty_end < in.penalty_begin ||
        static_cast<size_t>(in.penalty_end) > num_penalty_entries) {
      *error = absl::StrCat("SampleOnDevice: row ", r, " names penalty entries [",
                            in.penalty_begin, ", ", in.penalty_end, ") of ",
                            num_penalty_entries);
      return false;
    }
    any_penalty |= in.penalty_end > in.penalty_begin &&
                   (in.repetition_penalty != 1.0f || in.presence_penalty != 0.0f ||
                    in.frequency_penalty != 0.0f);
  }
  // One scratch area: sampling params, penalty params, penalty tokens and counts, then the
  // outputs (ids, logprobs); 256-byte aligned parts.
  auto align = [](size_t n) { return (n + 255) / 256 * 256; };
  const size_t sample_bytes = align(num_rows * sizeof(gpu::SamplingRowParams));
  const size_t penalty_bytes = align(num_rows * sizeof(gpu::PenaltyRowParams));
  const size_t list_bytes = align(num_penalty_entries * sizeof(int32_t));
  const size_t out_bytes = align(num_rows * sizeof(int32_t));
  const size_t total = sample_bytes + penalty_bytes + 2 * list_bytes + 2 * out_bytes;
  auto* io = static_cast<char*>(Ensure(sample_io_, total, "sampling parameters"));
  if (io == nullptr) {
    *error = first_error_.ToString();
    return false;
  }
  auto* d_sample = reinterpret_cast<gpu::SamplingRowParams*>(io);
  auto* d_penalty = reinterpret_cast<gpu::PenaltyRowParams*>(io + sample_bytes);
  auto* d_tokens_in = reinterpret_cast<int32_t*>(io + sample_bytes + penalty_bytes);
  auto* d_counts = reinterpret_cast<int32_t*>(io + sample_bytes + penalty_bytes + list_bytes);
  auto* d_ids = reinterpret_cast<int32_t*>(io + sample_bytes + penalty_bytes + 2 * list_bytes);
  auto* d_logprobs = reinterpret_cast<float*>(io + sample_bytes + penalty_bytes +
                                              2 * list_bytes + out_bytes);
  CopyToDeviceAsync(d_sample, sample.data(), num_rows * sizeof(gpu::SamplingRowParams));
  const float* sampled_from = logits;
  if (any_penalty) {
    CopyToDeviceAsync(d_penalty, penalty.data(), num_rows * sizeof(gpu::PenaltyRowParams));
    CopyToDeviceAsync(d_tokens_in, penalty_tokens, num_penalty_entries * sizeof(int32_t));
    CopyToDeviceAsync(d_counts, penalty_output_counts, num_penalty_entries * sizeof(int32_t));
    const size_t logit_bytes = static_cast<size_t>(num_rows) * vocab * sizeof(float);
    auto* work = static_cast<float*>(Ensure(penalized_, logit_bytes, "penalised logits"));
    if (work == nullptr) {
      *error = first_error_.ToString();
      return false;
    }
    RecordCuda(cudaMemcpyAsync(work, logits, logit_bytes, cudaMemcpyDeviceToDevice, stream_),
               "cudaMemcpyAsync of logits for penalties");
    if (!gpu::LaunchApplyPenalties(work, num_rows, vocab, d_penalty, d_tokens_in, d_counts,
                                   stream_, error)) {
      return false;
    }
    sampled_from = work;
  }
  if (!gpu::LaunchSample(sampled_from, num_rows, vocab, d_sample, d_ids, nullptr, stream_,
                         error) ||
      !gpu::LaunchLogProbsAt(logits, num_rows, vocab, d_ids, d_logprobs, stream_, error)) {
    return false;
  }
  CopyToHost(tokens, d_ids, num_rows * sizeof(int32_t));
  CopyToHost(logprobs, d_logprobs, num_rows * sizeof(float));
  if (!first_error_.ok()) {
    *error = std::string(first_error_.message());
    return false;
  }
  return true;
}

bool CudaBackend::BeginCapture() {
  if (capturing_ || !first_error_.ok()) return false;
  if (cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  capturing_ = true;
  capture_error_ = absl::OkStatus();
  return true;
}

int CudaBackend::EndCapture() {
  if (!capturing_) return -1;
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  cudaGraphExec_t exec = nullptr;
  bool ok = ended == cudaSuccess && capture_error_.ok() && graph != nullptr &&
            cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (!ok) {
    cudaGetLastError();  // A failed capture is not the backend's error.
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    std::fprintf(stderr, "tessera cuda backend (device %d): graph capture failed (%s); running "
                 "eagerly\n", device_,
                 capture_error_.ok() ? cudaGetErrorString(ended)
                                     : std::string(capture_error_.message()).c_str());
    return -1;
  }
  graphs_.push_back(exec);
  return static_cast<int>(graphs_.size()) - 1;
}

void CudaBackend::LaunchGraph(int id) {
  if (id < 0 || id >= static_cast<int>(graphs_.size())) {
    Record(absl::InvalidArgumentError(absl::StrCat("LaunchGraph: no graph ", id)));
    return;
  }
  RecordCuda(cudaGraphLaunch(graphs_[id], stream_), "cudaGraphLaunch");
  ++graph_launches_;
}

void CudaBackend::ClearGraphs() {
  if (!graphs_.empty()) RecordCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  for (cudaGraphExec_t g : graphs_) cudaGraphExecDestroy(g);
  graphs_.clear();
}

}  // namespace tessera::kernels
