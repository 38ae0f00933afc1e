// FlashInfer's sm_90 paged prefill, instantiated for what Tessera serves: causal, BF16,
// head_dim 64 and 128, with and without a sliding window (four kernels, about 40 s of nvcc
// each). See attention_sm90.h.
#include "kernels/cuda/attention_sm90.h"

#include <cuda_bf16.h>

#include <flashinfer/attention/hopper/default_params.cuh>
#include <flashinfer/attention/hopper/prefill_sm90.cuh>
#include <flashinfer/attention/hopper/variants.cuh>

namespace tessera::kernels::gpu {
namespace {

namespace fi = flashinfer;
using Bf16 = cutlass::bfloat16_t;
using Params = fi::BatchPrefillPagedParams<Bf16, Bf16, Bf16, int32_t>;

template <uint32_t D, bool kWindow>
cudaError_t Dispatch(Params& params, cudaStream_t stream) {
  // SAME_SCHEDULE_FOR_ALL_HEADS = false: our schedule lists every (tile, head) work.
  return fi::BatchPrefillWithPagedKVCacheDispatched<D, D, fi::MaskMode::kCausal, kWindow,
                                                    /*SAME_SCHEDULE_FOR_ALL_HEADS=*/false,
                                                    fi::StandardAttention, Params>(
      params, /*enable_pdl=*/false, stream);
}

bool Fail(std::string* error, std::string message) {
  if (error != nullptr) *error = std::move(message);
  return false;
}

}  // namespace

bool AttentionPrefillSm90Supported(const KvCacheShape& shape, DType act, int num_q_heads) {
  return act == DType::kBF16 && (shape.dtype == DType::kBF16 || shape.dtype == DType::kF8E4M3) &&
         (shape.head_dim == 64 || shape.head_dim == 128) && shape.num_kv_heads > 0 &&
         num_q_heads % shape.num_kv_heads == 0;
}

bool LaunchPagedAttentionPrefillSm90(const Sm90PrefillArgs& a, cudaStream_t stream,
                                     std::string* error) {
  if (a.shape.dtype != DType::kBF16 ||
      !AttentionPrefillSm90Supported(a.shape, DType::kBF16, a.num_q_heads)) {
    return Fail(error, "PagedAttentionPrefillSm90: needs BF16 pages at head_dim 64 or 128");
  }
  if (a.schedule == nullptr || a.layout.num_ctas <= 0) {
    return Fail(error, "PagedAttentionPrefillSm90: no schedule (Backend::PlanAttention)");
  }
  const int d = a.shape.head_dim;
  const int64_t row = static_cast<int64_t>(a.shape.num_kv_heads) * d;
  Params p{};
  p.q_ptr = static_cast<Bf16*>(const_cast<void*>(a.q));
  p.k_ptr = static_cast<Bf16*>(const_cast<void*>(a.k_cache));
  p.v_ptr = static_cast<Bf16*>(const_cast<void*>(a.v_cache));
  p.o_ptr = static_cast<Bf16*>(a.out);
  p.lse_ptr = nullptr;
  int32_t* s = const_cast<int32_t*>(a.schedule);
  p.qo_tile_indices = s + a.layout.qo_tile_indices;
  p.qo_indptr = s + a.layout.qo_indptr;
  p.kv_indptr = s + a.layout.kv_indptr;
  p.kv_indices = const_cast<int32_t*>(a.block_tables);
  p.qo_lens = s + a.layout.qo_lens;
  p.kv_lens = s + a.layout.kv_lens;
  p.head_indices = s + a.layout.head_indices;
  p.work_indptr = s + a.layout.work_indptr;
  p.batch_indices = s + a.layout.batch_indices;
  p.additional_params.logits_soft_cap = 0.0f;
  p.additional_params.sm_scale = a.scale;
  p.additional_params.maybe_prefix_len_ptr = nullptr;
  p.additional_params.maybe_token_pos_in_items_ptr = nullptr;
  p.additional_params.token_pos_in_items_len = 0;
  p.additional_params.maybe_max_item_len_ptr = nullptr;
  p.q_stride_n = a.q_stride;
  p.q_stride_h = d;
  p.o_stride_n = static_cast<int64_t>(a.num_q_heads) * d;
  p.o_stride_h = d;
  // NHD pages: [num_blocks, block_size, num_kv_heads, head_dim].
  p.k_stride_n = row;
  p.k_stride_h = d;
  p.v_stride_n = row;
  p.v_stride_h = d;
  p.k_page_stride = row * a.shape.block_size;
  p.v_page_stride = p.k_page_stride;
  p.nnz_qo = a.nnz_qo;
  p.num_qo_heads = a.num_q_heads;
  p.num_kv_heads = a.shape.num_kv_heads;
  p.group_size = a.num_q_heads / a.shape.num_kv_heads;
  p.page_size = a.shape.block_size;
  // FlashInfer's window_left counts the keys left of the query's own: ours counts it too.
  p.window_left = a.window > 0 ? a.window - 1 : -1;
  p.causal = true;

  cudaError_t e = cudaSuccess;
  const bool window = a.window > 0;
  if (d == 64) {
    e = window ? Dispatch<64, true>(p, stream) : Dispatch<64, false>(p, stream);
  } else {
    e = window ? Dispatch<128, true>(p, stream) : Dispatch<128, false>(p, stream);
  }
  if (e != cudaSuccess) {
    return Fail(error, std::string("PagedAttentionPrefillSm90: ") + cudaGetErrorString(e));
  }
  return true;
}

}  // namespace tessera::kernels::gpu
