#ifndef TESSERA_KERNELS_BACKEND_H_
#define TESSERA_KERNELS_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtype.h"

// The backend-neutral op interface the forward pass is written against. Ops take raw
// pointers in the backend's memory plus shapes. Weights keep the checkpoint's dtype (decode
// is bound by weight bytes, so BF16 weights stay BF16). Activations between ops (the
// untyped `void*` buffers below) are in the backend's activation_dtype(): float32 on the
// CPU, BF16 by default on CUDA (half the activation traffic; every kernel accumulates in
// float32). The residual stream (`hidden`), the logits and the norm weights stay float32
// on every backend: the residual sums two contributions per layer, and rounding it each
// layer is what would cost quality.
// This header stays free of Abseil and gRPC so CUDA translation units may include it.
namespace tessera::kernels {

// How a weight matrix's bytes are arranged in backend memory.
enum class WeightLayout {
  kRowMajor,
  // kI8 only, the CPU backend's: blocks of 16 rows, in each block the columns in pairs,
  // 32 bytes per pair (row i's two bytes at 2i), columns zero-padded to whole groups of
  // 32; then, 64-byte aligned, one FP16 scale per (block, group, row). One 32-byte load
  // widened to 16-bit lanes is exactly the operand of VPDPWSSD for 16 output rows
  // (kernels/cpu/int8_blocked.h).
  kInt8Blocked16,
  // kU4 only, the CPU backend's: the same blocks and column pairs, 16 bytes per pair unit
  // (kernels/cpu/int8_blocked.h); float scales and zeros inside `data`.
  kU4Blocked16,
};

// A weight matrix [rows, cols], row-major (torch Linear layout: [out_features, in_features]).
// FP8 weights (kF8E4M3) carry one float scale per row (output channel):
// w[r][c] = scales[r] * value(data[r][c]). int8 weights (kI8) carry one scale per (row,
// group of `group_size` columns), [rows, ceil(cols / group_size)], or per row when
// group_size is 0: w[r][c] = scales[r][c / g] * data[r][c]; in `layout` kInt8Blocked16
// the scales live inside `data` and `scales` is null.
// Group-wise kU4 weights (GPTQ/AWQ) hold [rows, cols / 2] bytes (low nibble = even
// column) and per (row, group of `group_size` columns) a scale and a zero point:
// w[r][c] = scales[r][c / g] * (q[r][c] - zeros[r][c / g]).
struct MatrixView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  // Backend memory, set for quantized dtypes only: [rows] for kF8E4M3 (and kI8 with
  // group_size 0), [rows, ceil(cols / group_size)] for grouped kI8 and kU4.
  const float* scales = nullptr;
  // Columns sharing one scale (kU4: a divisor of cols, even); 0 = one scale per row.
  int group_size = 0;
  const float* zeros = nullptr;  // [rows, cols / group_size] for kU4, else unused.
  WeightLayout layout = WeightLayout::kRowMajor;
};

// Shape of one layer's K (or V) cache: [num_blocks, block_size, num_kv_heads, head_dim] of
// `dtype` (F32, BF16 or F8E4M3). An FP8 cache is followed, in the same allocation, by one
// float scale per (slot, head), [num_blocks, block_size, num_kv_heads]: a row is stored
// as value / scale with scale = max|row| / 448, so every head of every token uses the
// format's whole range (K and V rows differ by orders of magnitude across heads).
struct KvCacheShape {
  int num_blocks = 0;
  int block_size = 16;
  int num_kv_heads = 0;
  int head_dim = 0;
  DType dtype = DType::kF32;
  size_t elements() const {
    return static_cast<size_t>(num_blocks) * block_size * num_kv_heads * head_dim;
  }
  size_t rows() const { return static_cast<size_t>(num_blocks) * block_size * num_kv_heads; }
  // Byte offset of the FP8 scales from the start of the cache.
  size_t scales_offset() const { return elements() * DTypeSize(dtype); }
  // Bytes of one layer's K (or V) cache, scales included.
  size_t bytes() const {
    return scales_offset() + rows() * KvScaleBytes(dtype);
  }
};

// The sequences of one step, flattened: sequence s owns tokens
// [query_start[s], query_start[s+1]) of the step; after the step its KV cache holds
// context_lens[s] tokens, the step's tokens being the last ones (causal attention).
// All arrays live in backend memory.
struct AttentionBatch {
  int num_seqs = 0;
  int num_tokens = 0;
  const int32_t* query_start = nullptr;   // [num_seqs + 1]
  const int32_t* context_lens = nullptr;  // [num_seqs]
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
  int max_blocks_per_seq = 0;
  const int64_t* slot_mapping = nullptr;  // [num_tokens]: block_id * block_size + offset
  // Sliding-window attention (set per layer): a query at position q sees the keys at
  // positions k with q - sliding_window < k <= q. 0: every earlier key (plain causal).
  int sliding_window = 0;
  // How many leading sequences have exactly one token in this step (decode), known on the
  // host: a backend may give them its decode kernel and the rest its prefill kernel. The
  // worker orders each step's sequences decode first. 0: not known.
  int num_decode_seqs = 0;
};

// One rank's experts of one mixture-of-experts layer (Backend::MoeExperts). With tensor-
// parallel experts every rank holds every expert, each cut to its slice of the intermediate
// dimension; with expert parallelism a rank holds whole experts, a contiguous run of them.
struct ExpertWeights {
  int first_expert = 0;  // Global id of the first expert held here.
  int num_local = 0;     // Experts [first_expert, first_expert + num_local) live here.
  int intermediate = 0;  // Of each expert, this rank's slice.
  // Host arrays of num_local views (their data in backend memory), all of one dtype:
  // gate_up[e] [2 * intermediate, hidden] (the gate rows, then the up rows) and down[e]
  // [hidden, intermediate].
  const MatrixView* gate_up = nullptr;
  const MatrixView* down = nullptr;
};

// One row of sampling where the logits live (Backend::SampleOnDevice): the fields of
// SamplingParams (common/sampling_params.h), the seed already combined with the step, and
// the row's entries [penalty_begin, penalty_end) of the flat penalty arrays (the distinct
// tokens of the sequence so far and how often each occurs in its output).
struct DeviceSamplingRow {
  float temperature = 1.0f;  // 0: greedy.
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t penalty_begin = 0;
  int32_t penalty_end = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // ---- Memory. Allocate returns nullptr when the backend is out of memory.
  virtual void* Allocate(size_t bytes) = 0;
  virtual void Free(void* ptr) = 0;
  virtual void CopyToDevice(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void CopyToHost(void* host_dst, const void* src, size_t bytes) = 0;
  // A copy to the device that does not wait for the transfer: `host_src` may be reused as
  // soon as the call returns (a backend whose copies are asynchronous stages it), and
  // work queued afterwards sees the data. The forward pass uploads each step's metadata
  // this way, so the host can go on queueing kernels. Defaults to CopyToDevice.
  virtual void CopyToDeviceAsync(void* dst, const void* host_src, size_t bytes) {
    CopyToDevice(dst, host_src, bytes);
  }
  // Copies within backend memory. The default stages through the host; backends with
  // their own device memory override it.
  virtual void CopyOnDevice(void* dst, const void* src, size_t bytes);
  // dst row i = src row rows[i], for `n` rows of `row_bytes` bytes; `rows` is in backend
  // memory, so a captured graph replays for any choice of rows.
  virtual void GatherRows(const void* src, const int32_t* rows, int n, size_t row_bytes,
                          void* dst);
  virtual void Synchronize() = 0;
  // Bytes the backend could still allocate (for sizing the KV cache).
  virtual size_t FreeMemoryBytes() const = 0;
  // The memory the backend computes in: the device's, or the host's physical RAM on the
  // CPU (what --gpu-memory-utilization takes a share of). 0: unknown.
  virtual size_t TotalMemoryBytes() const { return 0; }
  // The layout its Gemm wants int8 weights in; the loader packs them so.
  virtual WeightLayout Int8WeightLayout() const { return WeightLayout::kRowMajor; }
  virtual WeightLayout Int4WeightLayout() const { return WeightLayout::kRowMajor; }

  // ---- Ops.
  // The dtype of the activation buffers the ops below take as `void*` (kF32 or kBF16).
  virtual DType activation_dtype() const { return DType::kF32; }

  // out[i, :] = table[ids[i] - vocab_begin, :] when the id falls in this shard's rows,
  // else zeros (vocab-parallel embedding; the all-reduce completes it).
  // ids [n], table [vocab_local, hidden], out [n, hidden] float32 (the residual stream).
  virtual void EmbeddingGather(const int32_t* ids, int n, MatrixView table, int64_t vocab_begin,
                               float* out) = 0;

  // out[i, :] = x[i, :] / sqrt(mean(x[i, :]^2) + eps) * weight. x [n, dim] float32,
  // out [n, dim] activations; weight [dim] float32.
  virtual void RmsNorm(const float* x, const float* weight, int n, int dim, float eps,
                       void* out) = 0;

  // Fused residual: hidden += delta, then out = RmsNorm(hidden). hidden [n, dim] float32;
  // delta, out [n, dim] activations.
  virtual void AddRmsNorm(float* hidden, const void* delta, const float* weight, int n, int dim,
                          float eps, void* out) = 0;

  // y[m, w.rows] = x[m, w.cols] * w^T, accumulated in float32. x: activations; y in
  // `y_dtype`, the activation dtype or kF32 (the lm_head's logits).
  virtual void Gemm(const void* x, int64_t m, MatrixView w, void* y, DType y_dtype) = 0;
  // y in the activation dtype. (Derived classes say `using Backend::Gemm;`.)
  void Gemm(const void* x, int64_t m, MatrixView w, void* y) {
    Gemm(x, m, w, y, activation_dtype());
  }

  // Hugging Face rotate-half RoPE, in place, on the first num_q_heads + num_kv_heads heads
  // of each row of `qkv` (activations; row length `row_stride` elements; q heads then k
  // heads). Pair (i, i + head_dim / 2) turns by the float32 angle positions[r] *
  // inv_freq[i]; cos and sin are multiplied by `cos_sin_scale` (1 except for yarn).
  // positions [n], inv_freq [head_dim / 2] (backend memory, from ComputeRopeFrequencies).
  virtual void Rope(void* qkv, int n, int row_stride, const int32_t* positions, int num_q_heads,
                    int num_kv_heads, int head_dim, const float* inv_freq,
                    float cos_sin_scale) = 0;

  // y[i, j] += bias[j]. y [n, dim] activations, bias [dim] float32 (Qwen2's q/k/v bias).
  virtual void AddBias(void* y, const float* bias, int n, int dim) = 0;

  // out[i, j] = silu(gate_up[i, j]) * gate_up[i, inter + j]. gate_up [n, 2*inter],
  // out [n, inter], both activations.
  virtual void SiluMul(const void* gate_up, int n, int inter, void* out) = 0;

  // Stores the step's K and V (activation rows of length `row_stride` elements,
  // kv_heads*head_dim used) at their slots, converted to shape.dtype. k_cache/v_cache: see
  // KvCacheShape.
  virtual void WriteKvCache(const void* k, const void* v, int row_stride, const int64_t* slots,
                            int n, const KvCacheShape& shape, void* k_cache, void* v_cache) = 0;

  // Causal paged attention for prefill and decode alike. q rows (activations) have length
  // `q_stride` elements (num_q_heads * head_dim used); out [num_tokens, num_q_heads *
  // head_dim] activations. Query head h reads KV head h / (num_q_heads / kv heads).
  virtual void PagedAttention(const void* q, int q_stride, const AttentionBatch& batch,
                              const void* k_cache, const void* v_cache,
                              const KvCacheShape& shape, int num_q_heads, float scale,
                              void* out) = 0;
  // The step's attention metadata on the host, once per forward pass before its layers are
  // queued and never inside a graph capture: a backend whose attention kernels schedule
  // their work on the host (the CUDA backend's sm_90 prefill) plans the step here, so that a
  // replayed graph finds the plan for the step it replays. `batch`'s arrays are host memory.
  // PagedAttention calls for other batches keep working unplanned.
  virtual void PlanAttention(const AttentionBatch& batch, const KvCacheShape& shape,
                             int num_q_heads) {}

  // y[i] += x[i] for i < n, both activations.
  virtual void Add(void* y, const void* x, size_t n) = 0;

  // ---- Qwen3 and mixtures of experts.
  // RMSNorm of each head, in place: the first `num_heads` heads (head_dim elements each) of
  // every row of x (activations, rows of `row_stride` elements) become
  // head / sqrt(mean(head^2) + eps) * weight, weight [head_dim] float32 (Qwen3's q_norm and
  // k_norm, before RoPE).
  virtual void HeadRmsNorm(void* x, int n, int row_stride, int num_heads, int head_dim,
                           const float* weight, float eps) = 0;

  // The router: per row of router_logits [n, num_experts] (float32), the softmax's top_k
  // experts in descending probability (equal probabilities: the lower expert id first) and
  // their probabilities, divided by their sum when `renormalize`. expert_ids [n, top_k]
  // int32 and weights [n, top_k] float32, backend memory.
  virtual void MoeRoute(const float* router_logits, int n, int num_experts, int top_k,
                        bool renormalize, int32_t* expert_ids, float* weights) = 0;

  // The experts held here: out[i, :] = sum over j < top_k whose expert e = expert_ids[i, j]
  // is held in `experts` of weights[i, j] * down_e(silu(gate_e(x[i])) * up_e(x[i])); zeros
  // where no routed expert is held here (expert parallelism: the all-reduce completes it).
  // x, out [n, hidden] activations; expert_ids and weights as MoeRoute writes them. Only the
  // weights of experts that some row was routed to are read.
  virtual void MoeExperts(const void* x, int n, int hidden, const int32_t* expert_ids,
                          const float* weights, int top_k, const ExpertWeights& experts,
                          void* out) = 0;

  // y[i, :] += sigmoid(gate_logits[i]) * x[i, :]: Qwen2-MoE's gated shared expert. y, x
  // [n, dim] activations; gate_logits [n] float32.
  virtual void AddSigmoidGated(void* y, const void* x, const float* gate_logits, int n,
                               int dim) = 0;

  // ---- Graphs (CUDA): the ops queued between BeginCapture and EndCapture are recorded,
  // not run, and LaunchGraph replays them with one launch. Pointers and shapes are baked
  // in, so the caller replays a graph only over the same buffers. Nothing may wait for the
  // device while capturing (no copies to the host, no synchronisation, no growing scratch):
  // a capture that tried fails and leaves the backend as it was.
  virtual bool SupportsGraphs() const { return false; }
  virtual bool BeginCapture() { return false; }
  // The new graph's id, or -1 when the capture failed (its ops did not run).
  virtual int EndCapture() { return -1; }
  virtual void LaunchGraph(int id) {}
  virtual void ClearGraphs() {}
  // Changes whenever a buffer the backend's own ops use moves (its scratch grew): graphs
  // captured before then are stale and must be captured again.
  virtual uint64_t GraphEpoch() const { return 0; }

  // ---- Sampling where the logits live, so only token ids cross to the host.
  virtual bool HasDeviceSampler() const { return false; }
  // `logits` [num_rows, vocab] in backend memory, unchanged; `tokens` and `logprobs` (the
  // raw distribution's log-probability of each chosen token) are host arrays of num_rows.
  // Penalties as worker/sampler.cc applies them; top-k, min-p and top-p cut as there, but
  // the draw walks the kept tokens in index order, so a seed picks other tokens than on
  // the host (the same distribution). False with `*error` on failure; backends without a
  // device sampler return false with "unsupported".
  virtual bool SampleOnDevice(const float* logits, int vocab, const DeviceSamplingRow* rows,
                              int num_rows, const int32_t* penalty_tokens,
                              const int32_t* penalty_output_counts, size_t num_penalty_entries,
                              int32_t* tokens, float* logprobs, std::string* error) {
    *error = "unsupported";
    return false;
  }
};

inline void Backend::CopyOnDevice(void* dst, const void* src, size_t bytes) {
  std::unique_ptr<char[]> staging(new char[bytes]);
  CopyToHost(staging.get(), src, bytes);
  CopyToDevice(dst, staging.get(), bytes);
}

inline void Backend::GatherRows(const void* src, const int32_t* rows, int n, size_t row_bytes,
                                void* dst) {
  std::vector<int32_t> host(n);
  CopyToHost(host.data(), rows, n * sizeof(int32_t));
  for (int i = 0; i < n; ++i) {
    CopyOnDevice(static_cast<char*>(dst) + i * row_bytes,
                 static_cast<const char*>(src) + host[i] * row_bytes, row_bytes);
  }
}

// The CPU backend with `num_threads` worker threads (0: one per core).
std::unique_ptr<Backend> MakeCpuBackend(int num_threads = 0);

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_BACKEND_H_
