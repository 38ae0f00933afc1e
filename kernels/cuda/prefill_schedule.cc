#include "kernels/cuda/prefill_schedule.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <queue>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera::kernels::gpu {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Keys tile `tile` (0-based from the sequence's first new token) reads under the causal
// mask: up to its last query's position.
int64_t TileKeys(int qo_len, int kv_len, int tile, int tile_q) {
  const int64_t end = static_cast<int64_t>(kv_len) - qo_len + static_cast<int64_t>(tile + 1) * tile_q;
  return std::clamp<int64_t>(end, 0, kv_len);
}

}  // namespace

int Sm90PrefillTileRows(int head_dim) { return head_dim == 64 ? 192 : 128; }

PrefillScheduleLayout PrefillScheduleLayout::For(int num_ctas, int capacity) {
  PrefillScheduleLayout l;
  l.num_ctas = num_ctas;
  l.capacity = capacity;
  const int64_t indptr = CeilDiv(num_ctas + 1, 4) * 4;
  const int64_t cap = CeilDiv(std::max(capacity, 1), 4) * 4;
  int64_t at = 0;
  l.work_indptr = at;
  at += indptr;
  for (int64_t* field : {&l.qo_tile_indices, &l.qo_indptr, &l.kv_indptr, &l.qo_lens,
                         &l.kv_lens, &l.head_indices, &l.batch_indices}) {
    *field = at;
    at += cap;
  }
  l.page_offsets = at;
  at += CeilDiv(std::max(capacity, 1) + 1, 4) * 4;
  l.total = at;
  return l;
}

int64_t PrefillScheduleWorks(const PrefillScheduleInput& in) {
  int64_t tiles = 0;
  for (size_t s = 0; s + 1 < in.query_start.size(); ++s) {
    tiles += CeilDiv(std::max(in.query_start[s + 1] - in.query_start[s], 0), in.tile_q);
  }
  return tiles * in.num_q_heads;
}

int64_t PrefillSchedulePages(const PrefillScheduleInput& in) {
  int64_t pages = 0;
  for (int32_t context : in.context_lens) pages += CeilDiv(std::max(context, 0), in.block_size);
  return pages;
}

absl::Status BuildPrefillSchedule(const PrefillScheduleInput& in,
                                  const PrefillScheduleLayout& layout,
                                  std::vector<int32_t>* out) {
  const int64_t works = PrefillScheduleWorks(in);
  const int64_t seqs = std::max<int64_t>(static_cast<int64_t>(in.query_start.size()) - 1, 0);
  if (works > layout.capacity || seqs > layout.capacity || layout.num_ctas <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("prefill schedule: ", works,
                                                   " works for a capacity of ", layout.capacity,
                                                   " on ", layout.num_ctas, " CTAs"));
  }
  out->assign(static_cast<size_t>(layout.total), 0);
  const int num_seqs = static_cast<int>(in.query_start.size()) - 1;
  int32_t* page_offsets = out->data() + layout.page_offsets;
  for (int s = 0; s < num_seqs; ++s) {
    page_offsets[s + 1] = page_offsets[s] + static_cast<int32_t>(CeilDiv(
                                                std::max(in.context_lens[s], 0), in.block_size));
  }
  // Longest context first, ties by index: the costliest tiles are dealt while every CTA is
  // still empty, and the schedule is the same for the same step.
  std::vector<int> order(std::max(num_seqs, 0));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return in.context_lens[a] > in.context_lens[b]; });

  struct Work {
    int32_t tile, qo_start, kv_start, qo_len, kv_len, head, seq;
  };
  std::vector<std::vector<Work>> per_cta(layout.num_ctas);
  // Min-heap of (accumulated cost, CTA): the least-loaded CTA, the lowest index on a tie.
  using Load = std::pair<double, int>;
  std::priority_queue<Load, std::vector<Load>, std::greater<>> heap;
  for (int c = 0; c < layout.num_ctas; ++c) heap.push({0.0, c});

  for (int head = 0; head < in.num_q_heads; ++head) {
    for (int s : order) {
      const int qo_len = in.query_start[s + 1] - in.query_start[s];
      const int kv_len = in.context_lens[s];
      const int tiles = static_cast<int>(CeilDiv(std::max(qo_len, 0), in.tile_q));
      for (int t = tiles - 1; t >= 0; --t) {
        auto [cost, cta] = heap.top();
        heap.pop();
        heap.push({cost + 2.0 * in.tile_q + static_cast<double>(TileKeys(qo_len, kv_len, t,
                                                                         in.tile_q)),
                   cta});
        const int32_t pages = in.compact_pages ? page_offsets[s] : s * in.max_blocks_per_seq;
        per_cta[cta].push_back(Work{t, in.query_start[s], pages, qo_len, kv_len, head, s});
      }
    }
  }

  int32_t* o = out->data();
  int32_t next = 0;
  for (int c = 0; c < layout.num_ctas; ++c) {
    o[layout.work_indptr + c] = next;
    for (const Work& w : per_cta[c]) {
      o[layout.qo_tile_indices + next] = w.tile;
      o[layout.qo_indptr + next] = w.qo_start;
      o[layout.kv_indptr + next] = w.kv_start;
      o[layout.qo_lens + next] = w.qo_len;
      o[layout.kv_lens + next] = w.kv_len;
      o[layout.head_indices + next] = w.head;
      o[layout.batch_indices + next] = w.seq;
      ++next;
    }
  }
  o[layout.work_indptr + layout.num_ctas] = next;
  return absl::OkStatus();
}

}  // namespace tessera::kernels::gpu
