// The per-step tensors cuDNN's paged SDPA reads, derived on the device from an
// AttentionBatch so that a step needs no copy to the host (kernels/cuda/cudnn_attention.h
// says why). Host code: cudnn_attention.cc, which declares LaunchCudnnSdpaMetadata itself
// because this file stays free of Abseil and cuDNN.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

namespace tessera::kernels::gpu {
namespace {

// One thread per page-table entry of the padded [graph_batch, graph_pages] table, and one
// per sequence (graph_batch + 1 of them, for the offsets' closing entry). Sequences at and
// after num_seqs are the graph's padding: zero lengths, offsets at the end of the data, page
// 0 (allocated memory, never read for a zero-length sequence).
__global__ void CudnnSdpaMetadataKernel(const int32_t* __restrict__ query_start,
                                        const int32_t* __restrict__ context_lens,
                                        const int32_t* __restrict__ block_tables, int num_seqs,
                                        int max_blocks_per_seq, int graph_batch,
                                        int graph_pages, int32_t q_stride, int32_t o_stride,
                                        int32_t* __restrict__ seq_len_q,
                                        int32_t* __restrict__ seq_len_kv,
                                        int32_t* __restrict__ ragged_q,
                                        int32_t* __restrict__ ragged_o,
                                        int32_t* __restrict__ page_table) {
  const int first = blockIdx.x * blockDim.x + threadIdx.x;
  const int step = gridDim.x * blockDim.x;
  const int entries = graph_batch * graph_pages;
  for (int i = first; i < entries; i += step) {
    const int s = i / graph_pages;
    const int page = i - s * graph_pages;
    page_table[i] = s < num_seqs && page < max_blocks_per_seq
                        ? block_tables[static_cast<int64_t>(s) * max_blocks_per_seq + page]
                        : 0;
  }
  for (int s = first; s <= graph_batch; s += step) {
    const int start = query_start[s < num_seqs ? s : num_seqs];
    // Offsets are in elements, not tokens (cuDNN's ragged-offset convention); the host
    // checked that num_tokens * stride fits in int32.
    ragged_q[s] = start * q_stride;
    ragged_o[s] = start * o_stride;
    if (s < graph_batch) {
      const bool real = s < num_seqs;
      seq_len_q[s] = real ? query_start[s + 1] - start : 0;
      seq_len_kv[s] = real ? context_lens[s] : 0;
    }
  }
}

}  // namespace

bool LaunchCudnnSdpaMetadata(const int32_t* query_start, const int32_t* context_lens,
                             const int32_t* block_tables, int num_seqs, int max_blocks_per_seq,
                             int graph_batch, int graph_pages, int32_t q_stride,
                             int32_t o_stride, int32_t* seq_len_q, int32_t* seq_len_kv,
                             int32_t* ragged_q, int32_t* ragged_o, int32_t* page_table,
                             cudaStream_t stream, std::string* error) {
  constexpr int kThreads = 256;
  const int64_t work = std::max<int64_t>(static_cast<int64_t>(graph_batch) * graph_pages,
                                         graph_batch + 1);
  const int blocks = static_cast<int>(std::min<int64_t>((work + kThreads - 1) / kThreads, 1024));
  CudnnSdpaMetadataKernel<<<blocks, kThreads, 0, stream>>>(
      query_start, context_lens, block_tables, num_seqs, max_blocks_per_seq, graph_batch,
      graph_pages, q_stride, o_stride, seq_len_q, seq_len_kv, ragged_q, ragged_o, page_table);
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) {
    *error = std::string("cuDNN SDPA metadata kernel: ") + cudaGetErrorString(status);
    return false;
  }
  return true;
}

}  // namespace tessera::kernels::gpu
