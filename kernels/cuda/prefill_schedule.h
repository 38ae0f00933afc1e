#ifndef TESSERA_KERNELS_CUDA_PREFILL_SCHEDULE_H_
#define TESSERA_KERNELS_CUDA_PREFILL_SCHEDULE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

// The host-side work list of the persistent sm_90 prefill kernel (FlashInfer's FA3-style
// kernel, attention_sm90.cu). Plain C++ so the CPU suite tests it: the kernel runs only on
// Hopper.
//
// The kernel launches one CTA per SM; CTA c processes works [work_indptr[c],
// work_indptr[c + 1]), each a (query tile of `tile_q` rows, query head) of one sequence. The
// works are dealt longest-first to the least-loaded CTA (the LPT rule FlashInfer's own
// planner uses), costed as 2 * tile_q + the keys the tile reads, so a long prompt's causal
// tiles and a short chunk's spread evenly over the SMs.
//
// The arrays sit at offsets fixed by a capacity rather than by the step's work count: the
// kernel's pointers are baked into CUDA graphs, and a replay of the same graph with other
// sequence lengths must find each array where the capture did.
namespace tessera::kernels::gpu {

// Query rows per work of FlashInfer's sm_90 paged prefill at this head size (its
// BatchPrefillWithPagedKVCacheDispatched: 192 at head_dim 64, 128 at 128).
int Sm90PrefillTileRows(int head_dim);

// The packed arrays, in this order, each `capacity` long except work_indptr (num_ctas + 1,
// padded to a multiple of 4 ints so every array starts 16-byte aligned).
struct PrefillScheduleLayout {
  int num_ctas = 0;
  int capacity = 0;  // Works the buffer holds.
  int64_t work_indptr = 0;  // Offsets in int32 elements.
  int64_t qo_tile_indices = 0;
  int64_t qo_indptr = 0;
  int64_t kv_indptr = 0;
  int64_t qo_lens = 0;
  int64_t kv_lens = 0;
  int64_t head_indices = 0;
  int64_t batch_indices = 0;
  // [num_seqs + 1]: where each sequence's pages start in a compact copy of the planned
  // sequences' pages (PrefillScheduleInput::compact_pages), the last entry their total.
  int64_t page_offsets = 0;
  int64_t total = 0;  // int32 elements of the whole buffer.

  static PrefillScheduleLayout For(int num_ctas, int capacity);
};

// What the planner needs of the step's non-decode sequences, on the host. query_start holds
// num_seqs + 1 absolute token indices of the step (the kernel reads q at those rows);
// sequence s's K/V pages are entries [s * max_blocks_per_seq, ...) of the block tables.
struct PrefillScheduleInput {
  absl::Span<const int32_t> query_start;
  absl::Span<const int32_t> context_lens;
  int max_blocks_per_seq = 0;
  int num_q_heads = 0;
  int tile_q = 128;
  int num_ctas = 0;  // The GPU's SM count.
  int block_size = 16;
  // The kernel reads a compact copy of the sequences' pages (an FP8 cache dequantized to
  // BF16 for the step): sequence s's pages are [page_offsets[s], page_offsets[s + 1]) of
  // the copy, in order, instead of its row of the block tables.
  bool compact_pages = false;
};

// Works the step needs: num_q_heads * sum over sequences of ceil(new tokens / tile_q).
int64_t PrefillScheduleWorks(const PrefillScheduleInput& in);

// Pages the planned sequences' contexts span: sum over sequences of
// ceil(context_len / block_size), the size of the compact copy.
int64_t PrefillSchedulePages(const PrefillScheduleInput& in);

// Fills `out` (resized to layout.total) with the schedule and the page offsets.
// InvalidArgument when layout.capacity is below PrefillScheduleWorks(in) or the number of
// sequences. Sequences without new tokens get no work.
absl::Status BuildPrefillSchedule(const PrefillScheduleInput& in, const PrefillScheduleLayout& layout,
                          std::vector<int32_t>* out);

}  // namespace tessera::kernels::gpu

#endif  // TESSERA_KERNELS_CUDA_PREFILL_SCHEDULE_H_
