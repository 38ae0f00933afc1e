#ifndef TESSERA_KERNELS_CUDA_ATTENTION_SM90_H_
#define TESSERA_KERNELS_CUDA_ATTENTION_SM90_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/backend.h"
#include "kernels/cuda/prefill_schedule.h"

// Prefill attention on Hopper: FlashInfer's FA3-style kernel (warp-specialised producer and
// consumer warpgroups, TMA loads of Q, WGMMA products, the online softmax of one tile
// overlapped with the next tile's products), over Tessera's paged cache as it is: NHD pages
// of block_size tokens with the block tables as FlashInfer's page indices, a row of the
// tables per sequence. Built only where the FlashInfer headers were fetched
// (TESSERA_HAVE_FLASHINFER) and compiled for sm_90a only; the backend calls it on compute
// capability 9.0 devices and keeps its tensor-core kernel everywhere else.
namespace tessera::kernels::gpu {

// BF16 activations, a BF16 or FP8 E4M3 cache at head_dim 64 or 128, whole GQA groups. The
// kernel itself reads BF16 pages: for an FP8 cache the backend first dequantizes the pages
// the step reads into a compact BF16 copy (LaunchDequantizeFp8Pages), since FlashInfer's FP8
// path takes one scale per head where Tessera's cache keeps one per token and head.
bool AttentionPrefillSm90Supported(const KvCacheShape& shape, DType act, int num_q_heads);

struct Sm90PrefillArgs {
  const void* q = nullptr;  // [nnz_qo rows of q_stride] BF16; head h at column h * head_dim.
  int q_stride = 0;
  int nnz_qo = 0;  // Rows of q and out the schedule's qo_indptr entries may index.
  // The page indices the schedule's kv_indptr entries point into: the planned sequences'
  // rows of the block tables, or (compact copy) 0, 1, 2, ...
  const int32_t* block_tables = nullptr;
  const void* k_cache = nullptr;  // BF16 pages.
  const void* v_cache = nullptr;
  KvCacheShape shape;  // dtype kBF16.
  int num_q_heads = 0;
  float scale = 1.0f;
  int window = 0;  // AttentionBatch::sliding_window.
  const int32_t* schedule = nullptr;  // Device copy of BuildPrefillSchedule's output.
  PrefillScheduleLayout layout;
  void* out = nullptr;  // [nnz_qo, num_q_heads * head_dim] BF16.
};

bool LaunchPagedAttentionPrefillSm90(const Sm90PrefillArgs& args, cudaStream_t stream,
                                     std::string* error);

}  // namespace tessera::kernels::gpu

#endif  // TESSERA_KERNELS_CUDA_ATTENTION_SM90_H_
