#ifndef TESSERA_KERNELS_CUDA_CUDNN_ATTENTION_H_
#define TESSERA_KERNELS_CUDA_CUDNN_ATTENTION_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"

// cuDNN 9's fused SDPA over the paged KV cache: one of the three measured candidates for
// Hopper prefill attention (issue 33; the others are FlashInfer's FA3 kernel and our own
// tensor-core kernel). gpu_bench and tests/kernels/cuda/cuda_cudnn_attention_test.cc call it;
// CudaBackend does not, until a measurement says it should.
//
// Design, and why:
// - cuDNN is opened at run time (the frontend's NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING): the
//   frontend does not open it itself but reads the global `cudnn_frontend::cudnn_dlhandle`,
//   which this library defines and fills with dlopen("libcudnn.so.9") in Create(). Every
//   frontend entry point caches its symbol in a function-local static on first use, so no
//   frontend call may happen before that dlopen has succeeded: with a null handle the
//   lookups would cache null and throw. Create() therefore asks cuDNN for its version
//   through its own dlsym, and a machine without cuDNN (or with one too old for paged SDPA
//   over ragged queries, 9.7.0) gets absl::UnavailableError, never an exit. The handle is
//   never closed: the frontend's cached pointers outlive any object.
//   Only one translation unit in a program may define cudnn_dlhandle; a second user of the
//   frontend in the same binary must link this library rather than define its own.
// - The layouts are the ones the rest of Tessera uses, described to cuDNN by strides, so
//   nothing is copied: Q is the packed [num_tokens, q_stride] rows (a ragged "THD" tensor
//   whose per-sequence offsets are in elements), the caches are NHD pages
//   [num_blocks, block_size, kv_heads, head_dim] given as cuDNN's paged container
//   [num_blocks, kv_heads, block_size, head_dim] with strides (block_size*kv_heads*D, D,
//   kv_heads*D, 1), and O is packed [num_tokens, q_heads * head_dim].
// - Masking is cuDNN's bottom-right-aligned causal band (right bound 0): with seq_len_q = n
//   and seq_len_kv = c a query row i may see key j iff j <= c - n + i, which is
//   paged::TokenPosition. A sliding window is the band's left bound w: keys j with
//   j > c - n + i - w, the same rule as AttentionBatch::sliding_window.
// - cuDNN wants per-sequence tensors in its own formats: seq_len_q and seq_len_kv
//   [B,1,1,1] int32, ragged element offsets [B+1,1,1,1] int32 for Q and O, and a page
//   table [B,1,max_pages,1] int32 whose shape is part of the compiled graph. A small kernel
//   (cudnn_attention_kernels.cu) derives all of them on the device from query_start,
//   context_lens and block_tables, so a step needs no device-to-host copy and the same
//   inputs the other candidates take. The page table is copied into a padded [B, pages]
//   buffer because the graph's page-table width is a bucket, not the batch's
//   max_blocks_per_seq (a table stride would be one more graph key); the copy is
//   B * pages int32, negligible next to the attention itself.
// - What the device kernel cannot give is the graph's shape: cuDNN compiles a plan for a
//   batch size, a maximum query length and a maximum KV length. Those come from the host
//   (HostBatchInfo; the scheduler knows them), rounded up to powers of two so a handful of
//   graphs serve a whole benchmark sweep. Padded sequences get zero lengths. Graphs are
//   cached per (batch, query, KV buckets, cache and head geometry, window, scale); building
//   one costs milliseconds to seconds, running a cached one does not.
// - The object owns its cuDNN handle, the cached graphs, one workspace (the largest any
//   cached graph asked for) and the metadata buffer. It is not thread-safe, and Run calls
//   must be ordered on one stream (or the caller synchronises between streams): the
//   workspace and metadata are reused by the next Run.
// Supported: BF16 Q, caches and O; head_dim 64 or 128; num_q_heads a multiple of
// num_kv_heads (GQA). Anything else is absl::UnimplementedError, and so is whatever the
// installed cuDNN rejects for the given shape (e.g. a sliding window on an older release),
// with cuDNN's reason in the message.
namespace tessera::kernels {

// Bounds known on the host for one step, which fix the shape of the cuDNN graph. They must
// not understate: cuDNN reads and masks within the graph's shape only.
struct CudnnHostBatchInfo {
  // The longest run of new tokens of one sequence: max over s of
  // query_start[s + 1] - query_start[s].
  int max_query_len = 0;
  // The longest context after the step: max over s of context_lens[s].
  int max_context_len = 0;
};

class CudnnPagedPrefill {
 public:
  // Opens cuDNN and creates a handle on the current device. Unavailable when libcudnn.so.9
  // cannot be loaded, is older than kMinCudnnVersion or built for another CUDA major, or no
  // device can be used.
  static absl::StatusOr<std::unique_ptr<CudnnPagedPrefill>> Create();

  // cuDNN 9.7.0: the first release whose SDPA takes paged caches together with ragged
  // (packed variable-length) queries.
  static constexpr int64_t kMinCudnnVersion = 90700;

  ~CudnnPagedPrefill();
  CudnnPagedPrefill(const CudnnPagedPrefill&) = delete;
  CudnnPagedPrefill& operator=(const CudnnPagedPrefill&) = delete;

  // What this class can never run, known without cuDNN: OK or Unimplemented/InvalidArgument
  // with the reason. Run returns the same errors, plus what cuDNN itself rejects.
  static absl::Status CheckSupported(const KvCacheShape& shape, int num_q_heads, int q_stride);

  // Paged causal attention of the step `batch` (device arrays; see AttentionBatch), as
  // Backend::PagedAttention computes it, for BF16 data:
  //   q   [batch.num_tokens, q_stride] BF16, head h at column h * head_dim;
  //   out [batch.num_tokens, num_q_heads * head_dim] BF16;
  //   k_cache, v_cache [shape.num_blocks, shape.block_size, num_kv_heads, head_dim] BF16.
  // batch.sliding_window > 0 limits each query to that many trailing keys. Enqueued on
  // `stream`; an OK return means accepted, not finished. The first call for a new graph
  // shape builds the graph (slow; do it in warm-up when timing).
  absl::Status Run(const void* q, int q_stride, const AttentionBatch& batch,
                   const KvCacheShape& shape, const void* k_cache, const void* v_cache,
                   int num_q_heads, float scale, void* out, cudaStream_t stream,
                   const CudnnHostBatchInfo& host);

  // The loaded cuDNN's version, e.g. 91900 for 9.19.0.
  int64_t cudnn_version() const { return cudnn_version_; }
  // Graphs built so far (each a distinct bucket and geometry).
  size_t num_cached_graphs() const;

 private:
  struct State;  // The handle, graphs and buffers (cudnn_attention.cc).

  explicit CudnnPagedPrefill(int64_t cudnn_version);

  int64_t cudnn_version_;
  std::unique_ptr<State> state_;
};

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CUDA_CUDNN_ATTENTION_H_
