#ifndef TESSERA_KERNELS_CUDA_LAUNCHERS_H_
#define TESSERA_KERNELS_CUDA_LAUNCHERS_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/dtype.h"
#include "kernels/backend.h"

// Plain host functions that launch the CUDA kernels. This is the only header the .cu files
// share with host code, so it stays free of Abseil/gRPC: raw device pointers, shapes and a
// stream in; `true`, or `false` with a message naming the unsupported value (or the CUDA
// error) in *error. Work is enqueued on `stream` and runs asynchronously; a `true` return
// means the launch was accepted, not that the kernel has finished.
namespace tessera::kernels::gpu {

// ---- Element-wise and row ops (elementwise_kernels.cu). Semantics as in Backend. The
// untyped activation buffers hold `act` elements: kF32 (the default, for float callers)
// or kBF16; values are widened to float32 for the arithmetic and rounded once when stored.
bool LaunchEmbeddingGather(const int32_t* ids, int n, MatrixView table, int64_t vocab_begin,
                           float* out, cudaStream_t stream, std::string* error);
bool LaunchRmsNorm(const float* x, const float* weight, int n, int dim, float eps, void* out,
                   cudaStream_t stream, std::string* error, DType act = DType::kF32);
bool LaunchAddRmsNorm(float* hidden, const void* delta, const float* weight, int n, int dim,
                      float eps, void* out, cudaStream_t stream, std::string* error,
                      DType act = DType::kF32);
bool LaunchRope(void* qkv, int n, int row_stride, const int32_t* positions, int num_q_heads,
                int num_kv_heads, int head_dim, const float* inv_freq, float cos_sin_scale,
                cudaStream_t stream, std::string* error, DType act = DType::kF32);
bool LaunchAddBias(void* y, const float* bias, int n, int dim, cudaStream_t stream,
                   std::string* error, DType act = DType::kF32);
bool LaunchSiluMul(const void* gate_up, int n, int inter, void* out, cudaStream_t stream,
                   std::string* error, DType act = DType::kF32);
// Slots outside [0, num_blocks * block_size) are skipped (padding tokens use -1). Rows are
// stored in shape.dtype (FP8 with a per-(slot, head) scale; see KvCacheShape).
bool LaunchWriteKvCache(const void* k, const void* v, int row_stride, const int64_t* slots,
                        int n, const KvCacheShape& shape, void* k_cache, void* v_cache,
                        cudaStream_t stream, std::string* error, DType act = DType::kF32);
bool LaunchAdd(void* y, const void* x, size_t n, cudaStream_t stream, std::string* error,
               DType act = DType::kF32);
// dst row i = src row rows[i] (Backend::GatherRows); `rows` in device memory.
bool LaunchGatherRows(const void* src, const int32_t* rows, int n, size_t row_bytes, void* dst,
                      cudaStream_t stream, std::string* error);
// dst[i] = round-to-nearest-even(src[i]) in `dtype`, between two different dtypes of F32,
// BF16 and F16: GEMM operands and outputs the activations do not match.
bool LaunchConvert(const void* src, DType src_dtype, size_t n, DType dtype, void* dst,
                   cudaStream_t stream, std::string* error);

// Qwen3's q/k norm (Backend::HeadRmsNorm): one warp per (row, head), float32 sum of
// squares, in place.
bool LaunchHeadRmsNorm(void* x, int n, int row_stride, int num_heads, int head_dim,
                       const float* weight, float eps, cudaStream_t stream, std::string* error,
                       DType act = DType::kF32);
// y[i, :] += sigmoid(gate_logits[i]) * x[i, :] (Backend::AddSigmoidGated).
bool LaunchAddSigmoidGated(void* y, const void* x, const float* gate_logits, int n, int dim,
                           cudaStream_t stream, std::string* error, DType act = DType::kF32);

// ---- GEMV for few rows (gemv_kernels.cu): y[m, w.rows] = x[m, w.cols] * w^T with BF16 or
// F16 weights, x in `x_dtype` (F32 or BF16), y in `y_dtype` (F32 or BF16), float32
// accumulation. Streams the weights with 128-bit loads when w.cols % 8 == 0 and both
// pointers are 16-byte aligned (scalar loads otherwise).
constexpr int kGemvMaxRows = 8;
bool LaunchGemv(const void* x, int m, MatrixView w, void* y, cudaStream_t stream,
                std::string* error, DType x_dtype = DType::kF32, DType y_dtype = DType::kF32);

// ---- Weight-only quantized weights: kI8 / kF8E4M3 with a scale per row, kU4 with a scale
// and zero per (row, group); see MatrixView.
// The columns sharing a kU4 scale: group_size, or the whole row when it is 0.
inline int QuantizedGroupSize(const MatrixView& w) {
  return w.group_size > 0 ? w.group_size : static_cast<int>(w.cols);
}
// True when `w` is a quantized dtype with what its decoding needs (scales; kU4: zeros and an
// even group size dividing the columns); else false with a message prefixed by `what`.
bool CheckQuantizedWeights(const MatrixView& w, const char* what, std::string* error);

// Fused decode GEMV (quantized_gemv_kernels.cu): y[m, w.rows] = x[m, w.cols] * w^T for
// 1 <= m <= kQuantizedGemvMaxRows, reading the quantized bytes directly (no scratch),
// x in `x_dtype` and y in `y_dtype` (F32 or BF16 each), float32 accumulation. 128-bit weight loads when the pointers are 16-byte
// aligned and w.cols % 16 == 0 (kI8/kF8E4M3) or group % 32 == 0 (kU4); a scalar path
// otherwise. w.cols must be positive.
constexpr int kQuantizedGemvMaxRows = 8;
bool LaunchQuantizedGemv(const void* x, int m, MatrixView w, void* y, cudaStream_t stream,
                         std::string* error, DType x_dtype = DType::kF32,
                         DType y_dtype = DType::kF32);

// Prefill (quantized_gemm_kernels.cu): out [w.rows, w.cols] = BF16(w[r][c]), the scale (and
// zero) applied in float32 and rounded once, ready for the BF16 GEMM.
bool LaunchDequantizeToBf16(const MatrixView& w, void* out, cudaStream_t stream,
                            std::string* error);

// ---- FP8 activations for the FP8 x FP8 prefill GEMM (fp8_activation_kernels.cu).
// Device bytes LaunchQuantizeActivationsFp8 needs for n activations.
size_t Fp8ActivationWorkspaceBytes(size_t n);
// Quantizes x [n] (F32 or BF16, `x_dtype`) to E4M3 with one dynamic scale, amax / 448,
// all on the device: *out gets the codes and *scale the device float scale, both inside
// `workspace`.
bool LaunchQuantizeActivationsFp8(const void* x, size_t n, void* workspace, void** out,
                                  float** scale, cudaStream_t stream, std::string* error,
                                  DType x_dtype = DType::kF32);
// y[i][j] = src[i][j] * col_scales[j] * *tensor_scale for src [m, n] float32 and y [m, n]
// in `y_dtype` (F32 or BF16; y may be src when F32); col_scales and tensor_scale are device
// memory (the weights' row scales and the activations' scale).
bool LaunchScaleColumns(const float* src, const float* col_scales, const float* tensor_scale,
                        int64_t m, int64_t n, void* y, cudaStream_t stream, std::string* error,
                        DType y_dtype = DType::kF32);

// ---- Mixtures of experts (moe_kernels.cu, moe_grouped_kernels.cu).
// The router (Backend::MoeRoute): one warp per row of logits, softmax in float32, top_k
// picked by logit (so the order is the CPU's double-precision one exactly; equal logits:
// the lower id first).
constexpr int kMoeMaxExperts = 512;
constexpr int kMoeMaxTopK = 16;
bool LaunchMoeRoute(const float* logits, int n, int num_experts, int top_k, bool renormalize,
                    int32_t* expert_ids, float* weights, cudaStream_t stream, std::string* error);

// One held expert's weights as the expert kernels find them: a device array of these,
// indexed by local expert (expert id - first_expert), lets a kernel follow the routing it
// reads on the device, so no step waits for the host.
struct MoeExpertPointers {
  const void* gate_up = nullptr;         // [2 * intermediate, hidden]
  const float* gate_up_scales = nullptr;  // kI8 / kF8E4M3 only (see MatrixView)
  const void* down = nullptr;            // [hidden, intermediate]
  const float* down_scales = nullptr;
};

// One layer's held experts: every expert has the same dtype, shapes and scale groups.
struct MoeExpertsArgs {
  const MoeExpertPointers* table = nullptr;  // Device memory, [num_local].
  int first_expert = 0;
  int num_local = 0;
  int hidden = 0;
  int intermediate = 0;
  DType weight_dtype = DType::kBF16;
  int gate_up_group = 0;  // kI8: columns per scale (0: one per row). Else unused.
  int down_group = 0;
  bool aligned = false;   // Every weight pointer 16-byte aligned (vector loads).
};

// Expert weight dtypes the kernels read: BF16, F16, kI8 (row-major, per-row or grouped
// scales) and kF8E4M3 (per-row scales).
bool MoeExpertDtypeSupported(DType dtype);
// True when `experts` holds views the kernels can read as one MoeExpertsArgs (one dtype,
// [2 * intermediate, hidden] and [hidden, intermediate] shapes, row-major, scales where
// quantized); else false with a message naming the expert and the field.
bool CheckMoeExperts(const ExpertWeights& experts, int hidden, std::string* error);

// Decode: per (token, slot) routed to a held expert, gate_up GEMV, SiLU-mul into float32
// scratch, then per token the down GEMVs of its slots, weighted and summed in float32
// (in slot order: deterministic) into out, zeros where no slot is held. Reads only the
// routed experts' weights; cost grows with n * top_k, so it suits small batches.
size_t MoeExpertsGemvWorkspaceBytes(int n, int top_k, int intermediate);
bool LaunchMoeExpertsGemv(const void* x, int n, const int32_t* expert_ids,
                          const float* weights, int top_k, const MoeExpertsArgs& args,
                          void* workspace, size_t workspace_bytes, void* out,
                          cudaStream_t stream, std::string* error, DType act = DType::kF32);

// Prefill: per chunk of tokens, a device kernel buckets the (token, slot) pairs by held
// expert and lays out row tiles; a tiled grouped GEMM (float32 accumulation; BF16 tensor
// cores when `tensor_cores` (sm_80+) and act is BF16, float32 FMA otherwise) runs gate_up
// with SiLU-mul fused, then down, over each expert's rows; a last kernel sums each token's
// slots, weighted, in float32 and in slot order. Every size is known on the host (tile
// counts are bounded, not counted), so it is graph-capturable too. Tokens per chunk keep the
// workspace within a budget (MoeGroupedChunkTokens).
int MoeGroupedChunkTokens(int n, int top_k, int hidden, int intermediate, DType act);
size_t MoeExpertsGroupedWorkspaceBytes(int chunk_tokens, int top_k, int hidden,
                                       int intermediate, int num_local, DType act);
bool LaunchMoeExpertsGrouped(const void* x, int n, const int32_t* expert_ids,
                             const float* weights, int top_k, const MoeExpertsArgs& args,
                             int chunk_tokens, bool tensor_cores, void* workspace,
                             size_t workspace_bytes, void* out, cudaStream_t stream,
                             std::string* error, DType act = DType::kF32);

// ---- Paged attention (attention_kernels.cu). Supported head_dim: 8, 16, 32, 64, 128.
// q and out are activations of dtype `act` (F32 or BF16); scores, softmax and the PV
// accumulation are float32 whatever the activation and cache dtypes.
// Both kernels honour batch.sliding_window (see AttentionBatch).
bool AttentionHeadDimSupported(int head_dim);

// Split-K ("flash-decoding") kernel: one thread block per (token, group of query heads
// sharing a KV head, context partition), then a reduction kernel merges the partitions.
// Works for any batch; the backend uses it for decode steps. Needs
// AttentionSplitWorkspaceBytes(...) bytes of device `workspace`, called with the same
// batch shape, partition_size, sm_count and version.
//  - kV2 (the default): the partition count P comes from the planner
//    (kernels/cuda/decode_plan.h: batch shape, heads, block-table width and `sm_count`,
//    never the context lengths, so a captured CUDA graph stays valid), and each token cuts
//    its own visible keys into P even pieces (paged::EvenPartitionKeys). 16-byte K/V loads,
//    several keys in flight per thread.
//  - kV1: the previous kernel (partitions of a fixed size counted from key 0, float4 loads
//    of converted values), kept so benchmarks can compare both: BF16 and FP8 caches at
//    head_dim 64 and 128 only (an error elsewhere).
// partition_size > 0 overrides the plan: kV1 uses partitions of that many keys; kV2 uses
// P = ceil(max_blocks_per_seq * block_size / partition_size). sm_count <= 0: the planner's
// default (kDecodeDefaultSmCount); kV1 ignores it.
enum class SplitKernelVersion { kV1, kV2 };
// Whether kV1 is compiled for this cache: BF16 or FP8 at head_dim 64 or 128.
bool SplitV1Supported(const KvCacheShape& shape);
size_t AttentionSplitWorkspaceBytes(const AttentionBatch& batch, const KvCacheShape& shape,
                                    int num_q_heads, int partition_size, int sm_count = 0,
                                    SplitKernelVersion version = SplitKernelVersion::kV2);
bool LaunchPagedAttentionSplit(const void* q, int q_stride, const AttentionBatch& batch,
                               const void* k_cache, const void* v_cache,
                               const KvCacheShape& shape, int num_q_heads, float scale,
                               int partition_size, void* workspace, size_t workspace_bytes,
                               void* out, cudaStream_t stream, std::string* error,
                               DType act = DType::kF32, int sm_count = 0,
                               SplitKernelVersion version = SplitKernelVersion::kV2);

// Tiled kernel for prefill: one block per (16 consecutive tokens of one sequence, query
// head) walks the keys in tiles of 32 staged in shared memory. Works for any batch.
bool LaunchPagedAttentionPrefill(const void* q, int q_stride, const AttentionBatch& batch,
                                 const void* k_cache, const void* v_cache,
                                 const KvCacheShape& shape, int num_q_heads, float scale,
                                 void* out, cudaStream_t stream, std::string* error,
                                 DType act = DType::kF32);

// The pages the planned prefill sequences read, from an FP8 E4M3 cache (one scale per slot
// and KV head) into a compact BF16 copy [pages, block_size, kv_heads, head_dim] for K and V
// (kv_pages_kernels.cu): sequence s's pages j < page_offsets[s + 1] - page_offsets[s] go to
// page page_offsets[s] + j. page_offsets [num_seqs + 1] is on the device, so the launch
// (a fixed `grid` of blocks striding over the pages) replays in a graph for any contexts.
bool LaunchDequantizeFp8Pages(const int32_t* block_tables, int max_blocks_per_seq,
                              const int32_t* page_offsets, int num_seqs, int grid,
                              const KvCacheShape& shape, const void* k_cache,
                              const void* v_cache, void* k_out, void* v_out,
                              cudaStream_t stream, std::string* error);

// Tensor-core prefill (attention_tc_kernels.cu, sm_80+): flash-attention style BF16 WMMA
// products with float softmax and accumulation, 64 query rows per block, for BF16 and FP8
// caches at head_dim 64 or 128 (AttentionPrefillTcSupported); BF16 operand precision.
bool AttentionPrefillTcSupported(const KvCacheShape& shape);
bool LaunchPagedAttentionPrefillTc(const void* q, int q_stride, const AttentionBatch& batch,
                                   const void* k_cache, const void* v_cache,
                                   const KvCacheShape& shape, int num_q_heads, float scale,
                                   void* out, cudaStream_t stream, std::string* error,
                                   DType act = DType::kF32);

// ---- Sampling (sampling_kernels.cu) over a [rows, vocab] float32 logits buffer.
// Per-row parameters, in device memory. The draw depends only on the seed and the logits,
// so callers vary `seed` per step (e.g. request seed + step index).
struct SamplingRowParams {
  float temperature = 1.0f;  // <= 0: greedy (argmax).
  int32_t top_k = 0;         // <= 0 or >= vocab: no top-k cut.
  float top_p = 1.0f;        // >= 1: no nucleus cut.
  uint64_t seed = 0;
  float min_p = 0.0f;        // Keep tokens with p >= min_p * p_max; <= 0: no cut.
};

// Penalties of one row (as worker/sampler.cc applies them): entries [begin, end) of the
// flat `tokens` / `output_counts` arrays are the distinct tokens of the sequence so far
// and how often each occurs in its output (0: in the prompt only).
struct PenaltyRowParams {
  float repetition = 1.0f;  // Every listed token: logit / r if positive, else logit * r.
  float presence = 0.0f;    // Tokens with a count: minus presence + frequency * count.
  float frequency = 0.0f;
  int32_t begin = 0;
  int32_t end = 0;
};

// Applies each row's penalties to `logits` [rows, vocab] in place (device memory
// everywhere); tokens outside [0, vocab) are ignored.
bool LaunchApplyPenalties(float* logits, int rows, int vocab, const PenaltyRowParams* params,
                          const int32_t* tokens, const int32_t* output_counts,
                          cudaStream_t stream, std::string* error);

// logprobs[r] = log_softmax(logits[r])[tokens[r]]: the raw distribution's log-probability
// of a token chosen from a penalised copy.
bool LaunchLogProbsAt(const float* logits, int rows, int vocab, const int32_t* tokens,
                      float* logprobs, cudaStream_t stream, std::string* error);

// Greedy: the index of the largest logit (the lowest index among equal ones); NaNs never win.
// logprobs (nullable): log-softmax of the raw logits at the chosen token.
bool LaunchArgmax(const float* logits, int rows, int vocab, int32_t* tokens, float* logprobs,
                  cudaStream_t stream, std::string* error);

// Softmax(logits / temperature), restricted to the top_k largest logits (ties at the cut
// kept), then to those with p >= min_p * p_max and to the smallest set of the largest whose
// probability reaches top_p of the top-k set's (ties kept), renormalised; one draw per
// row. logprobs as for LaunchArgmax.
bool LaunchSample(const float* logits, int rows, int vocab, const SamplingRowParams* params,
                  int32_t* tokens, float* logprobs, cudaStream_t stream, std::string* error);

}  // namespace tessera::kernels::gpu

#endif  // TESSERA_KERNELS_CUDA_LAUNCHERS_H_
