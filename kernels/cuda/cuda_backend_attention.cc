// CudaBackend's paged attention: the split-KV decode kernel for a step's leading decode
// sequences, and for the rest the sm_90 prefill (FlashInfer's kernel, on the work list
// PlanAttention made for the step), the tensor-core kernel or the FP32 one.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kernels/cuda/cuda_backend.h"
#ifdef TESSERA_HAVE_FLASHINFER
#include "kernels/cuda/attention_sm90.h"
#endif

namespace tessera::kernels {
namespace {

// The step's leading sequences with one new token each, which take the split-KV kernel: all
// of them in a pure decode step, else as many as the worker counted (num_decode_seqs).
int LeadingDecodeSeqs(const AttentionBatch& batch) {
  if (batch.num_tokens == batch.num_seqs) return batch.num_seqs;
  return std::clamp(batch.num_decode_seqs, 0, batch.num_seqs);
}

}  // namespace

void CudaBackend::PagedAttention(const void* q, int q_stride, const AttentionBatch& batch,
                                 const void* k_cache, const void* v_cache,
                                 const KvCacheShape& shape, int num_q_heads, float scale,
                                 void* out) {
  std::string error;
  const DType act = activation_dtype_;
  const int decode_seqs = LeadingDecodeSeqs(batch);
  if (decode_seqs > 0) {
    // The leading decode sequences are tokens [0, decode_seqs), one each: a batch of their own.
    AttentionBatch decode = batch;
    decode.num_seqs = decode_seqs;
    decode.num_tokens = decode_seqs;
    // The split-KV plan depends on the batch shape and the SM count only (graph-stable).
    const gpu::SplitKernelVersion version =
        decode_v1_ && gpu::SplitV1Supported(shape) ? gpu::SplitKernelVersion::kV1
                                                    : gpu::SplitKernelVersion::kV2;
    const size_t bytes =
        gpu::AttentionSplitWorkspaceBytes(decode, shape, num_q_heads, 0, num_sms_, version);
    void* workspace = nullptr;
    if (bytes > 0) {
      workspace = Ensure(attention_, bytes, "attention partials");
      if (workspace == nullptr) return;
    }
    if (!gpu::LaunchPagedAttentionSplit(q, q_stride, decode, k_cache, v_cache, shape,
                                        num_q_heads, scale, 0, workspace, bytes, out, stream_,
                                        &error, act, num_sms_, version)) {
      RecordLaunch(false, error);
      return;
    }
  }
  if (decode_seqs == batch.num_seqs) return;
  // The rest: query_start keeps absolute token indices, so q and out need no offset.
  AttentionBatch rest = batch;
  rest.num_seqs = batch.num_seqs - decode_seqs;
  rest.num_tokens = batch.num_tokens - decode_seqs;
  rest.query_start = batch.query_start + decode_seqs;
  rest.context_lens = batch.context_lens + decode_seqs;
  rest.block_tables =
      batch.block_tables + static_cast<int64_t>(decode_seqs) * batch.max_blocks_per_seq;
  rest.slot_mapping = batch.slot_mapping == nullptr ? nullptr : batch.slot_mapping + decode_seqs;
  rest.num_decode_seqs = 0;
#ifdef TESSERA_HAVE_FLASHINFER
  // The plan PlanAttention made for this step's non-decode sequences, when it is this call's.
  const Sm90Plan& plan = sm90_plan_;
  if (plan.valid && plan.num_seqs == rest.num_seqs && plan.head_dim == shape.head_dim &&
      plan.num_q_heads == num_q_heads && plan.fp8 == (shape.dtype == DType::kF8E4M3) &&
      gpu::AttentionPrefillSm90Supported(shape, act, num_q_heads)) {
    const int32_t* schedule = static_cast<const int32_t*>(sm90_schedule_.data);
    gpu::Sm90PrefillArgs args;
    args.q = q;
    args.q_stride = q_stride;
    args.nnz_qo = plan.nnz_qo;
    args.block_tables = rest.block_tables;
    args.k_cache = k_cache;
    args.v_cache = v_cache;
    args.shape = shape;
    if (plan.fp8) {
      // This layer's pages of the planned sequences, dequantized into the compact copy.
      const size_t page_elems =
          static_cast<size_t>(shape.block_size) * shape.num_kv_heads * shape.head_dim;
      auto* k_pages = static_cast<uint16_t*>(sm90_pages_.data);
      uint16_t* v_pages = k_pages + page_elems * sm90_pages_capacity_;
      if (!gpu::LaunchDequantizeFp8Pages(rest.block_tables, rest.max_blocks_per_seq,
                                         schedule + plan.layout.page_offsets, rest.num_seqs,
                                         num_sms_ * 4, shape, k_cache, v_cache, k_pages,
                                         v_pages, stream_, &error)) {
        RecordLaunch(false, error);
        return;
      }
      args.k_cache = k_pages;
      args.v_cache = v_pages;
      args.block_tables =
          reinterpret_cast<const int32_t*>(v_pages + page_elems * sm90_pages_capacity_);
      args.shape.dtype = DType::kBF16;
      args.shape.num_blocks = sm90_pages_capacity_;
    }
    args.num_q_heads = num_q_heads;
    args.scale = scale;
    args.window = rest.sliding_window;
    args.schedule = schedule;
    args.layout = plan.layout;
    args.out = out;
    ++sm90_prefill_launches_;
    RecordLaunch(gpu::LaunchPagedAttentionPrefillSm90(args, stream_, &error), error);
    return;
  }
#endif
  if (bf16_tensor_cores_ && gpu::AttentionPrefillTcSupported(shape)) {
    RecordLaunch(gpu::LaunchPagedAttentionPrefillTc(q, q_stride, rest, k_cache, v_cache, shape,
                                                    num_q_heads, scale, out, stream_, &error,
                                                    act),
                 error);
    return;
  }
  RecordLaunch(gpu::LaunchPagedAttentionPrefill(q, q_stride, rest, k_cache, v_cache, shape,
                                                num_q_heads, scale, out, stream_, &error, act),
               error);
}

bool CudaBackend::sm90_prefill_available() const {
#ifdef TESSERA_HAVE_FLASHINFER
  return hopper_ && num_sms_ > 0 && prefill_attention_ == PrefillAttention::kAuto;
#else
  return false;
#endif
}

void CudaBackend::PlanAttention(const AttentionBatch& batch, const KvCacheShape& shape,
                                int num_q_heads) {
  sm90_plan_.valid = false;
  if (!sm90_prefill_available() || capturing_ ||
      !gpu::AttentionPrefillSm90Supported(shape, activation_dtype_, num_q_heads)) {
    return;
  }
  // The sequences after the leading decode ones, which PagedAttention gives this kernel.
  const int first = LeadingDecodeSeqs(batch);
  if (first >= batch.num_seqs) return;
  gpu::PrefillScheduleInput in;
  in.query_start = absl::MakeConstSpan(batch.query_start + first, batch.num_seqs - first + 1);
  in.context_lens = absl::MakeConstSpan(batch.context_lens + first, batch.num_seqs - first);
  in.max_blocks_per_seq = batch.max_blocks_per_seq;
  in.num_q_heads = num_q_heads;
  in.tile_q = gpu::Sm90PrefillTileRows(shape.head_dim);
  in.num_ctas = num_sms_;
  in.block_size = shape.block_size;
  in.compact_pages = shape.dtype == DType::kF8E4M3;
  const int64_t works =
      std::max<int64_t>(gpu::PrefillScheduleWorks(in), batch.num_seqs - first);
  if (works > sm90_capacity_) {
    // Room for 256 more sequences than this step's tiles: the warm-up's largest step sets
    // it once, and a later regrowth (new offsets) drops every captured graph.
    const int64_t tiles = (batch.num_tokens + in.tile_q - 1) / in.tile_q + 256;
    sm90_capacity_ = static_cast<int>(std::max<int64_t>(works, tiles * num_q_heads));
    ++graph_epoch_;
  }
  if (in.compact_pages) {
    const int64_t pages = gpu::PrefillSchedulePages(in);
    if (pages > sm90_pages_capacity_) {
      // Twice the need: a longer prompt later regrows it (and drops the graphs) rarely.
      const int64_t capacity = 2 * pages;
      const size_t page_elems =
          static_cast<size_t>(shape.block_size) * shape.num_kv_heads * shape.head_dim;
      const size_t bytes = capacity * (2 * page_elems * sizeof(uint16_t) + sizeof(int32_t));
      void* pages_buffer = Ensure(sm90_pages_, bytes, "sm_90 prefill BF16 pages");
      if (pages_buffer == nullptr) return;
      sm90_pages_capacity_ = static_cast<int>(capacity);
      ++graph_epoch_;
      std::vector<int32_t> identity(capacity);
      std::iota(identity.begin(), identity.end(), 0);
      CopyToDeviceAsync(static_cast<uint16_t*>(pages_buffer) + 2 * page_elems * capacity,
                        identity.data(), identity.size() * sizeof(int32_t));
    }
  }
  const gpu::PrefillScheduleLayout layout =
      gpu::PrefillScheduleLayout::For(num_sms_, sm90_capacity_);
  void* device = Ensure(sm90_schedule_, layout.total * sizeof(int32_t), "sm_90 prefill schedule");
  if (device == nullptr) return;
  if (absl::Status s = gpu::BuildPrefillSchedule(in, layout, &sm90_schedule_host_); !s.ok()) {
    Record(std::move(s));
    return;
  }
  CopyToDeviceAsync(device, sm90_schedule_host_.data(), layout.total * sizeof(int32_t));
  sm90_plan_ = Sm90Plan{.valid = true,
                        .first_seq = first,
                        .num_seqs = batch.num_seqs - first,
                        .nnz_qo = batch.num_tokens,
                        .head_dim = shape.head_dim,
                        .num_q_heads = num_q_heads,
                        .layout = layout,
                        .fp8 = in.compact_pages};
}

}  // namespace tessera::kernels
