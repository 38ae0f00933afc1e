#ifndef TESSERA_KERNELS_CUDA_CUDA_BACKEND_H_
#define TESSERA_KERNELS_CUDA_CUDA_BACKEND_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/backend.h"
#include "kernels/cuda/cublaslt_gemm.h"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/prefill_schedule.h"

namespace tessera::kernels {

// Number of usable CUDA devices; an error (never a crash) when the driver or devices are
// missing, saying what the runtime reported.
absl::StatusOr<int> CudaDeviceCount();

// The CUDA backend on one device: one stream (every op is enqueued on it, in call order), a
// cuBLASLt handle with its workspace, and scratch buffers grown on demand. Ops are
// asynchronous; Copy*, Synchronize and the sampling calls wait for the stream.
// Backend ops return void, so the first failure (an unsupported shape, a CUDA error) is
// kept and reported by status() and printed once to stderr; later ops still run.
// Not thread-safe: one worker thread drives one backend.
class CudaBackend final : public Backend {
 public:
  // Fails with a clear status when `device` does not exist or cannot be initialised.
  // `activation_dtype`: kBF16 (the default: half the activation bytes between kernels,
  // float32 accumulation inside them, float32 residual stream and logits) or kF32 (every
  // activation float32, as the CPU backend; the exact twin tests use it).
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(
      int device, DType activation_dtype = DType::kBF16);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string_view name() const override { return "cuda"; }

  void* Allocate(size_t bytes) override;
  void Free(void* ptr) override;
  void CopyToDevice(void* dst, const void* host_src, size_t bytes) override;
  void CopyToHost(void* host_dst, const void* src, size_t bytes) override;
  // Stages `host_src` in pinned memory and queues the transfer: no synchronisation. The
  // staging area is reused only once the stream is idle (after Synchronize or a copy to
  // host), so a pending transfer never reads overwritten bytes.
  void CopyToDeviceAsync(void* dst, const void* host_src, size_t bytes) override;
  // Queued on the stream (the default would stage through the host and wait twice).
  void CopyOnDevice(void* dst, const void* src, size_t bytes) override;
  void GatherRows(const void* src, const int32_t* rows, int n, size_t row_bytes,
                  void* dst) override;
  void Synchronize() override;
  size_t FreeMemoryBytes() const override;
  size_t TotalMemoryBytes() const override;

  DType activation_dtype() const override { return activation_dtype_; }
  void EmbeddingGather(const int32_t* ids, int n, MatrixView table, int64_t vocab_begin,
                       float* out) override;
  void RmsNorm(const float* x, const float* weight, int n, int dim, float eps,
               void* out) override;
  void AddRmsNorm(float* hidden, const void* delta, const float* weight, int n, int dim,
                  float eps, void* out) override;
  // m <= 8 with BF16/F16 weights: the GEMV kernel (x and y in their own dtypes, float32
  // accumulation). Otherwise cuBLASLt: BF16 activations on BF16 weights directly (y BF16 or
  // F32 straight from the GEMM); F32 weights on F32 activations exact; other pairings
  // convert the activations to the weight dtype in scratch first (and y through float32
  // scratch when cuBLASLt cannot write its dtype). Falls back to the GEMV kernel, 8 rows at
  // a time, if cuBLASLt has no algorithm. Quantized weights (kI8, kF8E4M3, kU4): m <= 8 the
  // fused quantized GEMV on the bytes themselves; larger m widens them to BF16 in scratch
  // (scales folded in) for cuBLASLt.
  using Backend::Gemm;
  void Gemm(const void* x, int64_t m, MatrixView w, void* y, DType y_dtype) override;
  void Rope(void* qkv, int n, int row_stride, const int32_t* positions, int num_q_heads,
            int num_kv_heads, int head_dim, const float* inv_freq,
            float cos_sin_scale) override;
  void AddBias(void* y, const float* bias, int n, int dim) override;
  void SiluMul(const void* gate_up, int n, int inter, void* out) override;
  void WriteKvCache(const void* k, const void* v, int row_stride, const int64_t* slots, int n,
                    const KvCacheShape& shape, void* k_cache, void* v_cache) override;
  // Decode tokens use the split-K kernel and prefill chunks the tiled kernel: a pure decode
  // batch all split-K, a mixed one (continuous batching) its batch.num_decode_seqs leading
  // sequences split-K and the rest tiled, so a decode token never costs a 16-row tile.
  // Prefill runs on the tensor cores (sm_80+) where the cache is BF16 or FP8 and head_dim
  // 64 or 128, precision the cache has already given up; FP32 caches keep the FP32 kernel.
  void PagedAttention(const void* q, int q_stride, const AttentionBatch& batch,
                      const void* k_cache, const void* v_cache, const KvCacheShape& shape,
                      int num_q_heads, float scale, void* out) override;
  // On compute capability 9.0 with BF16 activations and cache (head_dim 64/128), schedules
  // the step's non-decode sequences for FlashInfer's sm_90 prefill kernel, which
  // PagedAttention then runs for them; elsewhere a no-op (the tensor-core kernel needs no
  // plan).
  void PlanAttention(const AttentionBatch& batch, const KvCacheShape& shape,
                     int num_q_heads) override;
  void Add(void* y, const void* x, size_t n) override;
  // Qwen3 and mixtures of experts (cuda_backend_moe.cc; kernels in moe_kernels.cu,
  // moe_grouped_kernels.cu and elementwise_kernels.cu).
  void HeadRmsNorm(void* x, int n, int row_stride, int num_heads, int head_dim,
                   const float* weight, float eps) override;
  // num_experts <= gpu::kMoeMaxExperts, top_k <= gpu::kMoeMaxTopK.
  void MoeRoute(const float* router_logits, int n, int num_experts, int top_k, bool renormalize,
                int32_t* expert_ids, float* weights) override;
  // Expert weights BF16, F16, kI8 (row-major, per-row or grouped scales) or kF8E4M3; other
  // dtypes record UNIMPLEMENTED. At most gpu::kMoeMaxExperts held experts. n * top_k <=
  // moe_gemv_max_pairs(): the expert GEMVs (decode); more: the grouped GEMM (prefill). Both
  // read the routing on the device and are graph-capturable, once the layer's table of
  // expert pointers is on the device: it is uploaded on the layer's first call (outside a
  // capture; a capture that would need it fails) and kept, keyed by experts.gate_up.
  void MoeExperts(const void* x, int n, int hidden, const int32_t* expert_ids,
                  const float* weights, int top_k, const kernels::ExpertWeights& experts,
                  void* out) override;
  void AddSigmoidGated(void* y, const void* x, const float* gate_logits, int n,
                       int dim) override;
  // The largest n * top_k that MoeExperts gives the GEMV kernels (0: always grouped).
  void set_moe_gemv_max_pairs(int pairs) { moe_gemv_max_pairs_ = std::max(pairs, 0); }
  int moe_gemv_max_pairs() const { return moe_gemv_max_pairs_; }
  bool SupportsGraphs() const override { return true; }
  bool BeginCapture() override;
  int EndCapture() override;
  void LaunchGraph(int id) override;
  void ClearGraphs() override;
  uint64_t GraphEpoch() const override { return graph_epoch_; }
  // Graph replays so far (for tests and benchmarks).
  int64_t graph_launches() const { return graph_launches_; }
  bool HasDeviceSampler() const override { return true; }
  // Penalties on a device copy of the logits (when any row has them), the sampling kernel
  // on that copy, the raw log-probabilities from the original; one upload of the row
  // parameters and penalty lists, one download of ids and logprobs.
  bool SampleOnDevice(const float* logits, int vocab, const DeviceSamplingRow* rows,
                      int num_rows, const int32_t* penalty_tokens,
                      const int32_t* penalty_output_counts, size_t num_penalty_entries,
                      int32_t* tokens, float* logprobs, std::string* error) override;

  // ---- Beyond the Backend interface.
  // Sampling over device logits [rows, vocab]; tokens (and logprobs, nullable) are device
  // buffers of `rows` entries. `params` is host memory, one entry per row.
  absl::Status SampleGreedy(const float* logits, int rows, int vocab, int32_t* tokens,
                            float* logprobs);
  absl::Status Sample(const float* logits, int rows, int vocab,
                      absl::Span<const gpu::SamplingRowParams> params, int32_t* tokens,
                      float* logprobs);

  // Prefill GEMMs (m > 8) with FP8 E4M3 weights: with this on, and on sm_89+, the
  // activations are quantized to E4M3 too (one dynamic scale per GEMM, amax / 448) and
  // the product runs on the FP8 tensor cores, twice the BF16 rate, at FP8 accuracy (a few
  // % of the output's rms). Off by default: weight-only FP8 keeps the activation dtype. Where
  // cuBLASLt has no FP8 algorithm (K % 16 != 0, unaligned slices) the BF16 path runs.
  void set_fp8_activations(bool on) { fp8_activations_ = on; }
  // 16-bit dense weights take the GEMV kernel up to this many rows of x, cuBLASLt above
  // (0..gpu::kGemvMaxRows). With BF16 activations the default is 0: on an H200 cuBLASLt
  // streamed Llama-3-8B's BF16 layers at 3.58 TB/s for every m from 1 to 8, the GEMV kernel
  // at 3.04 (m = 1) down to 1.38 (m = 8) (gpu_bench's sweep). With float32 activations it
  // is kGemvMaxRows: the GEMV reads x as it is, where cuBLASLt would round it to BF16.
  void set_gemv_max_rows(int rows) { gemv_max_rows_ = std::clamp(rows, 0, gpu::kGemvMaxRows); }
  int gemv_max_rows() const { return gemv_max_rows_; }
  bool fp8_tensor_cores() const { return fp8_tensor_cores_; }
  // Which kernel prefill attention may use (for the benchmark's side-by-side runs and for
  // A/B checks; TESSERA_CUDA_PREFILL_ATTENTION=tc at creation forces the tensor-core one).
  // kAuto: the sm_90 kernel where it is built and the device is Hopper, else the tensor-core
  // one. Decode likewise: TESSERA_CUDA_DECODE_ATTENTION=v1 keeps the split-K kernel from
  // before the planner where it is compiled (gpu::SplitV1Supported).
  enum class PrefillAttention { kAuto, kTensorCore };
  void set_prefill_attention(PrefillAttention kind) { prefill_attention_ = kind; }
  // Whether PlanAttention would plan for the sm_90 kernel on this device and build.
  bool sm90_prefill_available() const;
  // Prefill attention calls that ran the sm_90 kernel (for tests and benchmarks).
  int64_t sm90_prefill_launches() const { return sm90_prefill_launches_; }
  // Prefill GEMMs that took the FP8 x FP8 path (for tests and benchmarks).
  int64_t fp8_gemms() const { return fp8_gemms_; }

  // The first error since creation (OK if none).
  absl::Status status() const { return first_error_; }
  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }

 private:
  // A device buffer that only grows.
  struct Scratch {
    void* data = nullptr;
    size_t bytes = 0;
  };

  CudaBackend(int device, cudaStream_t stream, std::unique_ptr<CublasLtGemm> gemm,
              bool fp8_tensor_cores, bool bf16_tensor_cores, DType activation_dtype)
      : device_(device),
        stream_(stream),
        gemm_(std::move(gemm)),
        fp8_tensor_cores_(fp8_tensor_cores),
        bf16_tensor_cores_(bf16_tensor_cores),
        activation_dtype_(activation_dtype),
        gemv_max_rows_(activation_dtype == DType::kBF16 ? 0 : gpu::kGemvMaxRows) {}
  // The FP8 x FP8 prefill GEMM; false (nothing recorded) when cuBLASLt cannot run it for
  // this shape, so the caller takes the BF16 path.
  bool GemmFp8Activations(const void* x, int64_t m, const MatrixView& w, void* y,
                          DType y_dtype);
  // cuBLASLt with weights that are not quantized; false (recorded) on failure.
  void GemmDense(const void* x, int64_t m, const MatrixView& w, void* y, DType y_dtype);
  // The GEMV kernel over m rows, 8 at a time (cuBLASLt's fallback).
  void GemvRows(const void* x, int64_t m, const MatrixView& w, void* y, DType y_dtype);
  void* Ensure(Scratch& scratch, size_t bytes, const char* what);
  // The device table of `experts`' pointers and the args to launch with; nullptr (recorded)
  // when the views are unusable or the table would have to be uploaded during a capture.
  const gpu::MoeExpertsArgs* ExpertTable(const ExpertWeights& experts, int hidden);
  void Record(absl::Status status);
  void RecordLaunch(bool ok, const std::string& error);
  void RecordCuda(cudaError_t err, const char* what);

  int device_;
  cudaStream_t stream_;
  std::unique_ptr<CublasLtGemm> gemm_;
  Scratch activations_;  // GEMM inputs converted to the weight dtype (when they differ).
  Scratch gemm_out_;     // GEMM outputs in float32 before rounding to BF16 (when needed).
  Scratch dequantized_;  // Quantized weights widened to BF16 for one prefill GEMM.
  Scratch attention_;    // Split-K partials.
  Scratch sampling_;     // Per-row sampling parameters.
  Scratch penalized_;    // SampleOnDevice: the logits with penalties applied.
  Scratch sample_io_;    // SampleOnDevice: parameters and penalty lists in, ids and logprobs out.
  Scratch fp8_inputs_;   // FP8 activations and their scale for one prefill GEMM.
  Scratch moe_;          // MoeExperts: routed activations, tiles, per-pair outputs.
  // The sm_90 prefill's schedule (PlanAttention) for sequences [first_seq, first_seq +
  // num_seqs) of the planned step; its arrays sit at offsets set by `layout.capacity`,
  // which changes only with the graph epoch.
  struct Sm90Plan {
    bool valid = false;
    int first_seq = 0;
    int num_seqs = 0;
    int nnz_qo = 0;
    int head_dim = 0;
    int num_q_heads = 0;
    gpu::PrefillScheduleLayout layout;
    bool fp8 = false;  // Through the compact BF16 copy in sm90_pages_.
  };
  Sm90Plan sm90_plan_;
  Scratch sm90_schedule_;
  // An FP8 cache's pages for the sm_90 prefill, dequantized per layer: K pages, V pages
  // (sm90_pages_capacity_ each) and the page indices 0, 1, 2, ... the kernel reads them by.
  Scratch sm90_pages_;
  int sm90_pages_capacity_ = 0;
  std::vector<int32_t> sm90_schedule_host_;
  int sm90_capacity_ = 0;
  int num_sms_ = 0;  // Multiprocessors: the persistent sm_90 kernel's CTAs.
  bool hopper_ = false;  // Compute capability 9.0 (WGMMA).
  PrefillAttention prefill_attention_ = PrefillAttention::kAuto;
  bool decode_v1_ = false;  // TESSERA_CUDA_DECODE_ATTENTION=v1.
  int64_t sm90_prefill_launches_ = 0;
  // One MoE layer's uploaded expert pointers, with the views they came from (a call whose
  // views differ, say after a reload at the same address, uploads again).
  struct ExpertTableEntry {
    std::vector<MatrixView> gate_up;
    std::vector<MatrixView> down;
    gpu::MoeExpertPointers* device = nullptr;  // [gate_up.size()]
    gpu::MoeExpertsArgs args;
  };
  std::unordered_map<const MatrixView*, ExpertTableEntry> expert_tables_;
  int moe_gemv_max_pairs_ = 64;
  // Stream capture: while capturing_, anything that would wait for the device or grow
  // scratch marks the capture failed instead of running (and errors go to capture_error_).
  bool capturing_ = false;
  absl::Status capture_error_;
  std::vector<cudaGraphExec_t> graphs_;
  uint64_t graph_epoch_ = 0;  // Bumped when a scratch buffer is reallocated.
  int64_t graph_launches_ = 0;
  // Pinned host memory for CopyToDeviceAsync; `staged_` bytes of it may still be in flight.
  void* staging_ = nullptr;
  size_t staging_bytes_ = 0;
  size_t staged_ = 0;
  absl::Status first_error_;
  bool warned_gemm_fallback_ = false;
  bool warned_fp8_fallback_ = false;
  bool fp8_tensor_cores_;   // Compute capability 8.9 or newer.
  bool bf16_tensor_cores_;  // Compute capability 8.0 or newer (BF16 WMMA).
  bool fp8_activations_ = false;
  int64_t fp8_gemms_ = 0;
  DType activation_dtype_;  // kBF16 or kF32.
  int gemv_max_rows_;       // After activation_dtype_, which sets its default.
};

// Convenience for callers that only need the Backend interface.
absl::StatusOr<std::unique_ptr<CudaBackend>> MakeCudaBackend(
    int device, DType activation_dtype = DType::kBF16);

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CUDA_CUDA_BACKEND_H_
