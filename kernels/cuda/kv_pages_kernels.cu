// Dequantizes the pages of an FP8 KV cache that a step's prefill sequences read into a
// compact BF16 copy, for kernels that take a BF16 cache (FlashInfer's sm_90 prefill). The
// copy is O(context) per layer against the prefill's O(context x new tokens) products.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/paged_index.h"

namespace tessera::kernels::gpu {
namespace {

constexpr int kThreads = 256;

// Page p of the copy belongs to the largest s with page_offsets[s] <= p (SeqOfToken's
// search over page offsets); it is that sequence's page p - page_offsets[s].
__global__ void __launch_bounds__(kThreads)
    DequantizeFp8PagesKernel(const int32_t* block_tables, int max_blocks_per_seq,
                             const int32_t* page_offsets, int num_seqs, int page_elems,
                             int head_dim, const uint8_t* k_cache, const uint8_t* v_cache,
                             const float* k_scales, const float* v_scales,
                             __nv_bfloat16* k_out, __nv_bfloat16* v_out) {
  const int total = page_offsets[num_seqs];
  for (int p = blockIdx.x; p < total; p += gridDim.x) {
    const int seq = paged::SeqOfToken(page_offsets, num_seqs, p);
    const int block =
        block_tables[static_cast<int64_t>(seq) * max_blocks_per_seq + (p - page_offsets[seq])];
    const int64_t src = static_cast<int64_t>(block) * page_elems;
    const int64_t dst = static_cast<int64_t>(p) * page_elems;
    for (int e = threadIdx.x; e < page_elems; e += kThreads) {
      // One scale per (slot, KV head): a row of head_dim elements.
      const int64_t row = (src + e) / head_dim;
      const float k = static_cast<float>(*reinterpret_cast<const __nv_fp8_e4m3*>(&k_cache[src + e]));
      const float v = static_cast<float>(*reinterpret_cast<const __nv_fp8_e4m3*>(&v_cache[src + e]));
      k_out[dst + e] = __float2bfloat16(k * k_scales[row]);
      v_out[dst + e] = __float2bfloat16(v * v_scales[row]);
    }
  }
}

}  // namespace

bool LaunchDequantizeFp8Pages(const int32_t* block_tables, int max_blocks_per_seq,
                              const int32_t* page_offsets, int num_seqs, int grid,
                              const KvCacheShape& shape, const void* k_cache,
                              const void* v_cache, void* k_out, void* v_out,
                              cudaStream_t stream, std::string* error) {
  if (shape.dtype != DType::kF8E4M3) {
    return Fail(error, "DequantizeFp8Pages: the cache is not FP8 E4M3");
  }
  if (num_seqs <= 0) return true;
  const int page_elems = shape.block_size * shape.num_kv_heads * shape.head_dim;
  const auto* k = static_cast<const uint8_t*>(k_cache);
  const auto* v = static_cast<const uint8_t*>(v_cache);
  DequantizeFp8PagesKernel<<<grid > 0 ? grid : 1, kThreads, 0, stream>>>(
      block_tables, max_blocks_per_seq, page_offsets, num_seqs, page_elems, shape.head_dim, k,
      v, reinterpret_cast<const float*>(k + shape.scales_offset()),
      reinterpret_cast<const float*>(v + shape.scales_offset()),
      static_cast<__nv_bfloat16*>(k_out), static_cast<__nv_bfloat16*>(v_out));
  return CheckLaunch("DequantizeFp8Pages", error);
}

}  // namespace tessera::kernels::gpu
