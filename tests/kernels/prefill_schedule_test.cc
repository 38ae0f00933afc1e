// The host-side schedule of the sm_90 prefill kernel (kernels/cuda/prefill_schedule.h),
// checked on the CPU: the kernel that consumes it runs only on Hopper, where a work listed
// twice would add a head's output twice and a work left out would leave rows unwritten.
#include "kernels/cuda/prefill_schedule.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace tessera::kernels::gpu {
namespace {

struct Step {
  std::vector<int32_t> query_start;
  std::vector<int32_t> context_lens;
};

// Sequences given as (new tokens, context after the step), packed after `offset` decode rows.
Step MakeStep(const std::vector<std::pair<int, int>>& seqs, int offset = 0) {
  Step s;
  s.query_start.push_back(offset);
  for (auto [num_new, context] : seqs) {
    s.query_start.push_back(s.query_start.back() + num_new);
    s.context_lens.push_back(context);
  }
  return s;
}

PrefillScheduleInput InputOf(const Step& s, int heads, int tile, int ctas, int max_blocks = 64) {
  PrefillScheduleInput in;
  in.query_start = s.query_start;
  in.context_lens = s.context_lens;
  in.max_blocks_per_seq = max_blocks;
  in.num_q_heads = heads;
  in.tile_q = tile;
  in.num_ctas = ctas;
  return in;
}

// The cost the planner balances: 2 * tile rows + the keys the causal tile reads.
double CostOf(int tile, int qo_len, int kv_len, int tile_q) {
  const int64_t end = static_cast<int64_t>(kv_len) - qo_len + static_cast<int64_t>(tile + 1) * tile_q;
  return 2.0 * tile_q + static_cast<double>(std::clamp<int64_t>(end, 0, kv_len));
}

struct Checked {
  std::vector<double> cta_cost;
  double max_work = 0;
};

// Every (sequence, tile, head) with new tokens exactly once, with the fields the kernel reads;
// returns each CTA's cost.
Checked CheckSchedule(const PrefillScheduleInput& in, const PrefillScheduleLayout& l,
                      const std::vector<int32_t>& out) {
  Checked c;
  c.cta_cost.assign(l.num_ctas, 0.0);
  EXPECT_EQ(out.size(), static_cast<size_t>(l.total));
  for (int64_t offset : {l.work_indptr, l.qo_tile_indices, l.qo_indptr, l.kv_indptr, l.qo_lens,
                         l.kv_lens, l.head_indices, l.batch_indices, l.page_offsets}) {
    EXPECT_EQ(offset % 4, 0) << "arrays start 16-byte aligned";
  }
  std::map<std::tuple<int, int, int>, int> seen;
  EXPECT_EQ(out[l.work_indptr], 0);
  for (int cta = 0; cta < l.num_ctas; ++cta) {
    const int begin = out[l.work_indptr + cta];
    const int end = out[l.work_indptr + cta + 1];
    EXPECT_LE(begin, end);
    for (int w = begin; w < end; ++w) {
      const int seq = out[l.batch_indices + w];
      const int tile = out[l.qo_tile_indices + w];
      const int head = out[l.head_indices + w];
      EXPECT_EQ(out[l.qo_indptr + w], in.query_start[seq]);
      EXPECT_EQ(out[l.qo_lens + w], in.query_start[seq + 1] - in.query_start[seq]);
      EXPECT_EQ(out[l.kv_lens + w], in.context_lens[seq]);
      EXPECT_EQ(out[l.kv_indptr + w], in.compact_pages ? out[l.page_offsets + seq]
                                                        : seq * in.max_blocks_per_seq);
      ++seen[{seq, tile, head}];
      const double cost = CostOf(tile, out[l.qo_lens + w], out[l.kv_lens + w], in.tile_q);
      c.cta_cost[cta] += cost;
      c.max_work = std::max(c.max_work, cost);
    }
  }
  EXPECT_EQ(out[l.work_indptr + l.num_ctas], PrefillScheduleWorks(in));
  for (size_t s = 0; s + 1 < in.query_start.size(); ++s) {
    const int qo_len = in.query_start[s + 1] - in.query_start[s];
    const int tiles = (qo_len + in.tile_q - 1) / in.tile_q;
    for (int t = 0; t < tiles; ++t) {
      for (int h = 0; h < in.num_q_heads; ++h) {
        auto it = seen.find({static_cast<int>(s), t, h});
        EXPECT_TRUE(it != seen.end() && it->second == 1)
            << "sequence " << s << " tile " << t << " head " << h << " scheduled "
            << (it == seen.end() ? 0 : it->second) << " times";
      }
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(PrefillScheduleWorks(in)));
  // Each sequence's pages follow the previous one's in the compact copy.
  EXPECT_EQ(out[l.page_offsets], 0);
  for (size_t s = 0; s < in.context_lens.size(); ++s) {
    EXPECT_EQ(out[l.page_offsets + s + 1] - out[l.page_offsets + s],
              (in.context_lens[s] + in.block_size - 1) / in.block_size)
        << "sequence " << s;
  }
  EXPECT_EQ(out[l.page_offsets + in.context_lens.size()], PrefillSchedulePages(in));
  return c;
}

TEST(PrefillScheduleTest, TileRowsFollowFlashInfersDispatch) {
  EXPECT_EQ(Sm90PrefillTileRows(64), 192);
  EXPECT_EQ(Sm90PrefillTileRows(128), 128);
}

TEST(PrefillScheduleTest, LayoutPlacesArraysAtCapacityOffsets) {
  const PrefillScheduleLayout l = PrefillScheduleLayout::For(132, 1000);
  EXPECT_EQ(l.work_indptr, 0);
  EXPECT_EQ(l.qo_tile_indices, 136);  // 133 rounded up to 4.
  EXPECT_EQ(l.qo_indptr - l.qo_tile_indices, 1000);
  EXPECT_EQ(l.page_offsets, 136 + 7 * 1000);
  EXPECT_EQ(l.total, 136 + 7 * 1000 + 1004);  // capacity + 1 page offsets, rounded up to 4.
  // The offsets depend on the capacity only, never on a step: graphs bake them in.
  const PrefillScheduleLayout again = PrefillScheduleLayout::For(132, 1000);
  EXPECT_EQ(again.batch_indices, l.batch_indices);
}

TEST(PrefillScheduleTest, OneLongPromptSpreadsEvenlyOverTheSms) {
  // Llama-3-8B at tp 1: 32 query heads, an 8,192-token prompt, an H100/H200's 132 SMs.
  const Step step = MakeStep({{8192, 8192}});
  const PrefillScheduleInput in = InputOf(step, 32, 128, 132, 512);
  const PrefillScheduleLayout l = PrefillScheduleLayout::For(132, PrefillScheduleWorks(in));
  std::vector<int32_t> out;
  ASSERT_TRUE(BuildPrefillSchedule(in, l, &out).ok());
  const Checked c = CheckSchedule(in, l, out);
  const double most = *std::max_element(c.cta_cost.begin(), c.cta_cost.end());
  double total = 0;
  for (double v : c.cta_cost) total += v;
  const double mean = total / c.cta_cost.size();
  // Longest-first dealing keeps every CTA within one work of the mean: with 2,048 works on
  // 132 CTAs (15.5 each) the busiest is within 1/15.5 of the mean (it measured 1.056).
  EXPECT_LE(most, mean + c.max_work);
  EXPECT_LT(most / mean, 1.07);
}

TEST(PrefillScheduleTest, MixedChunksAfterDecodeRowsKeepAbsoluteOffsets) {
  // Three decode rows ahead of the planned sequences: qo_indptr stays an absolute row of q.
  const Step step = MakeStep({{300, 4096}, {1, 17}, {0, 50}, {129, 129}, {64, 2000}}, 3);
  const PrefillScheduleInput in = InputOf(step, 8, 128, 16, 300);
  const PrefillScheduleLayout l = PrefillScheduleLayout::For(16, 200);
  std::vector<int32_t> out;
  ASSERT_TRUE(BuildPrefillSchedule(in, l, &out).ok());
  // 3 + 1 + 0 + 2 + 1 tiles per head.
  EXPECT_EQ(PrefillScheduleWorks(in), 7 * 8);
  CheckSchedule(in, l, out);
}

// An FP8 cache is dequantized into a compact BF16 copy of the planned sequences' pages:
// the works then index that copy, sequence after sequence.
TEST(PrefillScheduleTest, CompactPagesIndexTheCopy) {
  const Step step = MakeStep({{300, 4096}, {129, 129}, {64, 2000}, {1, 1}}, 2);
  PrefillScheduleInput in = InputOf(step, 8, 128, 16, 300);
  in.compact_pages = true;
  in.block_size = 16;
  EXPECT_EQ(PrefillSchedulePages(in), 256 + 9 + 125 + 1);
  const PrefillScheduleLayout l = PrefillScheduleLayout::For(16, 200);
  std::vector<int32_t> out;
  ASSERT_TRUE(BuildPrefillSchedule(in, l, &out).ok());
  CheckSchedule(in, l, out);
  EXPECT_EQ(out[l.page_offsets + 2], 256 + 9);
}

TEST(PrefillScheduleTest, RandomStepsAreCoveredExactlyOnce) {
  std::mt19937 rng(33);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::pair<int, int>> seqs;
    const int n = 1 + static_cast<int>(rng() % 9);
    for (int s = 0; s < n; ++s) {
      const int num_new = static_cast<int>(rng() % 700);
      seqs.push_back({num_new, num_new + static_cast<int>(rng() % 3000)});
    }
    const int tile = trial % 2 == 0 ? 128 : 192;
    const int heads = 1 << (rng() % 4);
    const int ctas = 1 + static_cast<int>(rng() % 140);
    const Step step = MakeStep(seqs, static_cast<int>(rng() % 5));
    PrefillScheduleInput in = InputOf(step, heads, tile, ctas, 40);
    in.block_size = 1 << (rng() % 6);
    in.compact_pages = trial % 3 == 0;
    const PrefillScheduleLayout l =
        PrefillScheduleLayout::For(ctas, static_cast<int>(PrefillScheduleWorks(in)) + trial % 3);
    std::vector<int32_t> out;
    ASSERT_TRUE(BuildPrefillSchedule(in, l, &out).ok());
    CheckSchedule(in, l, out);
    std::vector<int32_t> again;
    ASSERT_TRUE(BuildPrefillSchedule(in, l, &again).ok());
    EXPECT_EQ(out, again) << "the same step gets the same schedule";
  }
}

TEST(PrefillScheduleTest, TooSmallACapacityIsAnErrorNotAnOverflow) {
  const Step step = MakeStep({{1000, 1000}});
  const PrefillScheduleInput in = InputOf(step, 32, 128, 132);
  const PrefillScheduleLayout l = PrefillScheduleLayout::For(132, 100);  // 8 * 32 needed.
  std::vector<int32_t> out;
  const absl::Status s = BuildPrefillSchedule(in, l, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("256 works for a capacity of 100"), std::string::npos) << s;
}

}  // namespace
}  // namespace tessera::kernels::gpu
