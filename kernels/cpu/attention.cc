#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/attention_internal.h"
#include "kernels/cpu/kv_cache_format.h"
#include "kernels/cpu/vec_ops.h"

namespace tessera::kernels {
namespace {

// Multiply-adds (over all tokens, heads and context positions) below which one thread
// finishes sooner than the pool can hand out the work.
constexpr int64_t kMinParallelAttentionWork = int64_t{1} << 17;

// Upper bound on the query heads one work unit handles (sizes a stack array).
constexpr int kMaxHeadsPerUnit = 64;

struct TokenInfo {
  int seq;
  int position;
};

// Query heads [head_begin, head_end) of one token. Positions are the outer loop and heads
// the inner one: a cache row holds every KV head of a position contiguously, so this reads
// each row as one run instead of striding a page per position and head. Two passes: the
// scores (kept, so exp runs once per score), then the probability-weighted V rows. A
// 16-bit or FP8 cache row is converted to float once per key for all heads that read it.
void AttendHeads(const VecOps& ops, const float* q_row, const int32_t* block_table,
                 int position, int window, int head_begin, int head_end, int group,
                 const void* k_cache, const void* v_cache, const KvCacheShape& shape, float scale,
                 std::vector<float>& scores, float* out_row) {
  const int head_dim = shape.head_dim;
  const int heads = head_end - head_begin;
  std::memset(out_row + static_cast<int64_t>(head_begin) * head_dim, 0,
              sizeof(float) * heads * head_dim);
  // Keys [first, position] are visible: all of them, or the last `window`.
  const int first = window > 0 ? std::max(0, position - window + 1) : 0;
  const int n_ctx = position + 1 - first;
  if (n_ctx <= 0) return;
  const int block_size = shape.block_size;
  const size_t needed = static_cast<size_t>(heads) * n_ctx;
  if (scores.size() < needed) scores.resize(needed);
  const int kv_begin = head_begin / group, kv_end = (head_end - 1) / group + 1;
  thread_local std::vector<float> converted;
  if (converted.size() < static_cast<size_t>(shape.num_kv_heads) * head_dim) {
    converted.resize(static_cast<size_t>(shape.num_kv_heads) * head_dim);
  }
  // Float pointer to (slot, kv head 0): the cache itself, or the converted heads.
  auto row_of = [&](const void* cache, int p) -> const float* {
    const int pos = first + p;
    const int64_t slot =
        static_cast<int64_t>(block_table[pos / block_size]) * block_size + pos % block_size;
    if (shape.dtype == DType::kF32) {
      return static_cast<const float*>(cache) + KvRowIndex(shape, slot, 0);
    }
    for (int kv = kv_begin; kv < kv_end; ++kv) {
      LoadKvRow(cache, shape, slot, kv, converted.data() + static_cast<int64_t>(kv) * head_dim);
    }
    return converted.data();
  };
  for (int p = 0; p < n_ctx; ++p) {
    const float* k = row_of(k_cache, p);
    for (int h = head_begin; h < head_end; ++h) {
      scores[static_cast<size_t>(h - head_begin) * n_ctx + p] =
          ops.dot(q_row + static_cast<int64_t>(h) * head_dim,
                  k + static_cast<int64_t>(h / group) * head_dim, head_dim) *
          scale;
    }
  }
  float inv_sums[kMaxHeadsPerUnit];
  for (int h = 0; h < heads; ++h) {
    float* s = &scores[static_cast<size_t>(h) * n_ctx];
    float max_score = -std::numeric_limits<float>::infinity();
    for (int p = 0; p < n_ctx; ++p) max_score = std::max(max_score, s[p]);
    double sum = 0.0;
    for (int p = 0; p < n_ctx; ++p) {
      s[p] = std::exp(s[p] - max_score);
      sum += s[p];
    }
    inv_sums[h] = static_cast<float>(1.0 / sum);
  }
  for (int p = 0; p < n_ctx; ++p) {
    const float* v = row_of(v_cache, p);
    for (int h = head_begin; h < head_end; ++h) {
      ops.axpy(scores[static_cast<size_t>(h - head_begin) * n_ctx + p],
               v + static_cast<int64_t>(h / group) * head_dim,
               out_row + static_cast<int64_t>(h) * head_dim, head_dim);
    }
  }
  for (int h = head_begin; h < head_end; ++h) {
    float* o = out_row + static_cast<int64_t>(h) * head_dim;
    const float inv = inv_sums[h - head_begin];
    for (int d = 0; d < head_dim; ++d) o[d] *= inv;
  }
}

}  // namespace

void PagedAttentionAtLevel(SimdLevel level, const float* q, int q_stride,
                           const AttentionBatch& batch, const void* k_cache,
                           const void* v_cache, const KvCacheShape& shape, int num_q_heads,
                           float scale, float* out, ThreadPool* pool) {
  if (batch.num_tokens <= 0 || num_q_heads <= 0 || shape.num_kv_heads <= 0) return;
  const int head_dim = shape.head_dim;
  const int group = std::max(1, num_q_heads / shape.num_kv_heads);
  const VecOps& ops = GetVecOps(level);
  attention_internal::AttendHeadsFn wide = nullptr;
  if (level >= SimdLevel::kAvx512 && level <= DetectSimdLevel()) {
    wide = attention_internal::Avx512AttendHeads(head_dim, shape.dtype);
  }

  std::vector<TokenInfo> tokens(batch.num_tokens, TokenInfo{0, -1});
  for (int s = 0; s < batch.num_seqs; ++s) {
    const int begin = batch.query_start[s];
    const int end = batch.query_start[s + 1];
    const int first_position = batch.context_lens[s] - (end - begin);
    for (int t = std::max(begin, 0); t < std::min(end, batch.num_tokens); ++t) {
      tokens[t] = TokenInfo{s, first_position + (t - begin)};
    }
  }

  // Work units are (token, run of heads). Few tokens (decode) split their heads so every
  // thread has work; runs cover whole GQA groups where possible, so a K/V row read for one
  // head is still in L1 for the others of its group.
  const int threads = pool == nullptr ? 1 : pool->num_threads();
  const int runs_wanted = std::clamp((2 * threads + batch.num_tokens - 1) / batch.num_tokens, 1,
                                     num_q_heads);
  int heads_per_unit = (num_q_heads + runs_wanted - 1) / runs_wanted;
  if (heads_per_unit > group) heads_per_unit = (heads_per_unit + group - 1) / group * group;
  heads_per_unit = std::min({heads_per_unit, num_q_heads, kMaxHeadsPerUnit});
  const int runs = (num_q_heads + heads_per_unit - 1) / heads_per_unit;

  const int64_t out_stride = static_cast<int64_t>(num_q_heads) * head_dim;
  auto run = [&](int64_t unit_begin, int64_t unit_end) {
    thread_local std::vector<float> scores;
    for (int64_t unit = unit_begin; unit < unit_end; ++unit) {
      const int64_t t = unit / runs;
      const int head_begin = static_cast<int>(unit % runs) * heads_per_unit;
      const int head_end = std::min(num_q_heads, head_begin + heads_per_unit);
      const TokenInfo& info = tokens[t];
      const int32_t* table =
          batch.block_tables + static_cast<int64_t>(info.seq) * batch.max_blocks_per_seq;
      if (wide != nullptr) {
        wide(q + t * q_stride, table, info.position, batch.sliding_window, head_begin, head_end,
             group, k_cache, v_cache, shape, scale, scores, out + t * out_stride);
      } else {
        AttendHeads(ops, q + t * q_stride, table, info.position, batch.sliding_window,
                    head_begin, head_end, group, k_cache, v_cache, shape, scale, scores,
                    out + t * out_stride);
      }
    }
  };
  const int64_t units = static_cast<int64_t>(batch.num_tokens) * runs;
  // Waking the pool costs microseconds: small models' decode steps run faster inline.
  int64_t work = 0;
  for (int t = 0; t < batch.num_tokens; ++t) {
    const int keys = tokens[t].position + 1;
    work += batch.sliding_window > 0 ? std::min(keys, batch.sliding_window) : keys;
  }
  work *= static_cast<int64_t>(num_q_heads) * head_dim;
  if (pool == nullptr || units == 1 || work < kMinParallelAttentionWork) {
    run(0, units);
  } else {
    pool->ParallelFor(units, 1, run);
  }
}

void PagedAttention(const float* q, int q_stride, const AttentionBatch& batch,
                    const void* k_cache, const void* v_cache, const KvCacheShape& shape,
                    int num_q_heads, float scale, float* out, ThreadPool* pool) {
  PagedAttentionAtLevel(ActiveSimdLevel(), q, q_stride, batch, k_cache, v_cache, shape,
                        num_q_heads, scale, out, pool);
}

}  // namespace tessera::kernels
