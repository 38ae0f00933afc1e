// The split-K decode planner (kernels/cuda/decode_plan.h) and the per-token key assignment
// the split-K kernel uses on the device (paged::EvenPartitionKeys, its CPU twin): both
// plain host code, checked without a GPU.
#include "kernels/cuda/decode_plan.h"

#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/paged_index.h"

namespace tessera::kernels::gpu {
namespace {

constexpr int kH100Sms = 132;

DecodeSplitInputs Inputs(int num_tokens, int num_q_heads, int num_kv_heads, int max_keys,
                         int sm_count = kH100Sms) {
  DecodeSplitInputs in;
  in.num_tokens = num_tokens;
  in.num_q_heads = num_q_heads;
  in.num_kv_heads = num_kv_heads;
  in.heads_per_block = DecodeHeadsPerBlock(num_q_heads, num_kv_heads);
  in.max_keys = max_keys;
  in.sm_count = sm_count;
  return in;
}

TEST(DecodePlanTest, HeadsPerBlockIsTheLargestPowerOfTwoDividingTheGroup) {
  EXPECT_EQ(DecodeHeadsPerBlock(32, 8), 4);   // Llama-3-8B.
  EXPECT_EQ(DecodeHeadsPerBlock(64, 8), 8);   // Llama-3-70B.
  EXPECT_EQ(DecodeHeadsPerBlock(128, 8), 8);  // Groups of 16: two blocks per KV head.
  EXPECT_EQ(DecodeHeadsPerBlock(6, 2), 1);    // Groups of 3.
  EXPECT_EQ(DecodeHeadsPerBlock(12, 2), 2);   // Groups of 6.
  EXPECT_EQ(DecodeHeadsPerBlock(8, 8), 1);    // Multi-head attention.
}

// One sequence must fill the GPU: Llama-3-8B (8 head groups of 4) at 32k keys gets enough
// partitions for about two waves of kDecodeBlocksPerSm blocks per SM, capped by the
// minimum partition length.
TEST(DecodePlanTest, BatchOneAtLongContextFillsTheGpu) {
  const DecodeSplitPlan plan = PlanDecodeSplit(Inputs(1, 32, 8, 32768));
  EXPECT_EQ(plan.rows, 8);
  EXPECT_EQ(plan.num_partitions, 32768 / kDecodeMinPartitionKeys);  // 128: the cap binds.
  EXPECT_GE(plan.blocks, int64_t{kH100Sms} * kDecodeBlocksPerSm);   // At least one full wave.
  EXPECT_EQ(plan.blocks, plan.rows * plan.num_partitions);

  // Llama-3-70B at tp 8 (8 query heads over 1 KV head): a single row, cut as finely as
  // the minimum allows, which still puts blocks on every SM.
  const DecodeSplitPlan one_row = PlanDecodeSplit(Inputs(1, 8, 1, 131072));
  EXPECT_EQ(one_row.rows, 1);
  EXPECT_EQ(one_row.num_partitions, 131072 / kDecodeMinPartitionKeys);
  EXPECT_GE(one_row.blocks, kH100Sms);
  // With a table wide enough, the target (two waves) binds instead of the minimum.
  EXPECT_EQ(PlanDecodeSplit(Inputs(1, 8, 1, 1 << 20)).num_partitions,
            kH100Sms * kDecodeBlocksPerSm * kDecodeWaves);
}

TEST(DecodePlanTest, LargeBatchAtShortContextBarelySplits) {
  // Batch 256 at 512 keys: 2048 rows already fill two waves.
  EXPECT_EQ(PlanDecodeSplit(Inputs(256, 32, 8, 512)).num_partitions, 1);
  // Batch 64 at 4k keys: 512 rows, a few partitions to reach two waves.
  const DecodeSplitPlan plan = PlanDecodeSplit(Inputs(64, 32, 8, 4096));
  EXPECT_GE(plan.num_partitions, 2);
  EXPECT_LE(plan.num_partitions, 4);
}

TEST(DecodePlanTest, MoreSmsGetMorePartitions) {
  const int small = PlanDecodeSplit(Inputs(4, 32, 8, 65536, 16)).num_partitions;
  const int large = PlanDecodeSplit(Inputs(4, 32, 8, 65536, 132)).num_partitions;
  EXPECT_LT(small, large);
  // An unknown SM count plans as kDecodeDefaultSmCount.
  EXPECT_EQ(PlanDecodeSplit(Inputs(4, 32, 8, 65536, 0)).num_partitions,
            PlanDecodeSplit(Inputs(4, 32, 8, 65536, kDecodeDefaultSmCount)).num_partitions);
}

// Over a sweep of shapes: P >= 1, never partitions shorter than the minimum at the table's
// width (unless the table itself is shorter and P = 1), never more blocks than needed for
// the target once P > 1, and workspace bytes that follow from P.
TEST(DecodePlanTest, PartitionsNeverGoBelowTheMinimumAndWorkspaceFollows) {
  for (int sms : {1, 16, 108, 132, 264}) {
    for (int tokens : {1, 2, 3, 7, 8, 17, 64, 100, 256, 1024}) {
      for (auto [q_heads, kv_heads] :
           std::vector<std::pair<int, int>>{{6, 2}, {8, 1}, {32, 8}, {64, 8}, {28, 4}}) {
        for (int max_keys : {1, 16, 255, 256, 511, 512, 4096, 4097, 32768, 131072}) {
          const DecodeSplitInputs in = Inputs(tokens, q_heads, kv_heads, max_keys, sms);
          const DecodeSplitPlan plan = PlanDecodeSplit(in);
          SCOPED_TRACE(testing::Message() << "sms " << sms << " tokens " << tokens
                                          << " heads " << q_heads << "/" << kv_heads
                                          << " max_keys " << max_keys);
          ASSERT_GE(plan.num_partitions, 1);
          if (plan.num_partitions > 1) {
            ASSERT_GE(max_keys / plan.num_partitions, kDecodeMinPartitionKeys);
            // One partition fewer would not reach the target: P is the least that does.
            ASSERT_LT(plan.rows * (plan.num_partitions - 1),
                      int64_t{sms} * kDecodeBlocksPerSm * kDecodeWaves);
          }
          for (int head_dim : {8, 64, 128}) {
            const size_t bytes =
                DecodeSplitWorkspaceBytes(tokens, q_heads, head_dim, plan.num_partitions);
            const size_t expected =
                plan.num_partitions == 1
                    ? 0
                    : static_cast<size_t>(tokens) * q_heads * plan.num_partitions *
                          (head_dim + 2) * sizeof(float);
            ASSERT_EQ(bytes, expected) << "head_dim " << head_dim;
          }
        }
      }
    }
  }
}

// The plan is a function of the batch shape alone (what a CUDA graph captures): nothing in
// the inputs mentions context lengths, and equal inputs give equal plans.
TEST(DecodePlanTest, EqualShapesGiveEqualPlans) {
  const DecodeSplitPlan a = PlanDecodeSplit(Inputs(8, 32, 8, 8192));
  const DecodeSplitPlan b = PlanDecodeSplit(Inputs(8, 32, 8, 8192));
  EXPECT_EQ(a.num_partitions, b.num_partitions);
  EXPECT_EQ(a.blocks, b.blocks);
}

TEST(DecodePlanTest, EmptyBatchGetsOnePartitionAndNoWorkspace) {
  const DecodeSplitPlan plan = PlanDecodeSplit(Inputs(0, 32, 8, 4096));
  EXPECT_EQ(plan.num_partitions, 1);
  EXPECT_EQ(plan.blocks, 0);
  EXPECT_EQ(DecodeSplitWorkspaceBytes(0, 32, 128, 4), 0u);
}

// ---- The kernel's per-token key assignment (paged::EvenPartitionKeys).

using Assignment = std::function<void(int part, int num_partitions, int granule, int position,
                                      int window, int* begin, int* end)>;

bool Visible(int key, int position, int window) {
  return key <= position && (window == 0 || key > position - window);
}

// Empty if `assign` gives every key the query at `position` sees to exactly one of the
// `num_partitions` partitions, and no other key; else what went wrong.
std::string CoverageError(const Assignment& assign, int num_partitions, int granule,
                          int position, int window) {
  std::vector<int> seen(position + 1, 0);
  for (int part = 0; part < num_partitions; ++part) {
    int begin = 0;
    int end = 0;
    assign(part, num_partitions, granule, position, window, &begin, &end);
    for (int k = std::max(begin, 0); k < end; ++k) {
      if (k > position) return "partition " + std::to_string(part) + " scores future key " +
                               std::to_string(k);
      ++seen[k];
    }
  }
  for (int k = 0; k <= position; ++k) {
    const int want = Visible(k, position, window) ? 1 : 0;
    if (seen[k] != want) {
      return "key " + std::to_string(k) + " scored " + std::to_string(seen[k]) +
             " times, expected " + std::to_string(want) + " (partitions " +
             std::to_string(num_partitions) + ", granule " + std::to_string(granule) +
             ", position " + std::to_string(position) + ", window " + std::to_string(window) +
             ")";
    }
  }
  return "";
}

const Assignment kKernelAssignment = [](int part, int num_partitions, int granule, int position,
                                        int window, int* begin, int* end) {
  paged::EvenPartitionKeys(part, num_partitions, granule, position, window, begin, end);
};

// Property test: random positions (contexts up to 40k), windows and partition counts.
TEST(DecodePlanTest, EvenPartitionsCoverEveryVisibleKeyOnce) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> position_dist(0, 40000);
  std::uniform_int_distribution<int> parts_dist(1, 300);
  std::uniform_int_distribution<int> window_dist(1, 5000);
  for (int trial = 0; trial < 3000; ++trial) {
    const int position = trial < 200 ? trial : position_dist(rng);
    const int parts = trial % 7 == 0 ? 1 : parts_dist(rng);
    const int window = trial % 3 == 0 ? 0 : window_dist(rng);
    const int granule = trial % 5 == 0 ? 1 : kDecodePartitionGranule;
    const std::string error =
        CoverageError(kKernelAssignment, parts, granule, position, window);
    ASSERT_TRUE(error.empty()) << error;
  }
}

// Pieces are multiples of the granule, start at granule-aligned keys, and a query uses as
// many partitions as its keys allow: a short sequence in a wide table still spreads.
TEST(DecodePlanTest, EvenPartitionsAreAlignedAndSpread) {
  const int granule = kDecodePartitionGranule;
  for (int position : {0, 15, 16, 100, 511, 4095, 32767}) {
    for (int parts : {1, 4, 32, 128}) {
      const int size = paged::EvenPartitionSize(parts, granule, position, 0);
      ASSERT_EQ(size % granule, 0);
      ASSERT_GE(size * parts, position + 1);
      int used = 0;
      for (int part = 0; part < parts; ++part) {
        int begin = 0;
        int end = 0;
        paged::EvenPartitionKeys(part, parts, granule, position, 0, &begin, &end);
        if (begin >= end) continue;
        ++used;
        ASSERT_EQ(begin % granule, 0) << "position " << position << " part " << part;
      }
      // Rounding pieces up to the granule leaves at most about half the partitions empty
      // (when the keys just pass a multiple of granule * parts), never most of them.
      const int pieces = (position + 1 + granule - 1) / granule;
      ASSERT_GE(2 * used, std::min(parts, pieces)) << "position " << position << " parts "
                                                   << parts;
    }
  }
  // 32k keys over 128 partitions: 256 keys each, all used.
  EXPECT_EQ(paged::EvenPartitionSize(128, granule, 32767, 0), 256);
  // 1000 keys in a table planned for 32k: still spread over 63 partitions of 16 keys.
  int used = 0;
  for (int part = 0; part < 128; ++part) {
    int begin = 0;
    int end = 0;
    paged::EvenPartitionKeys(part, 128, granule, 999, 0, &begin, &end);
    used += begin < end ? 1 : 0;
  }
  EXPECT_EQ(used, 63);
  // A window of 100 keys ending at key 20000 spreads those keys only.
  EXPECT_EQ(paged::EvenPartitionSize(4, granule, 20000, 100), 32);
}

// The coverage check itself catches the mistakes it exists for: a piece that skips the
// last key, pieces that overlap, and pieces that ignore the window.
TEST(DecodePlanTest, CoverageCheckCatchesBrokenAssignments) {
  const Assignment skips_last = [](int part, int n, int granule, int position, int window,
                                   int* begin, int* end) {
    paged::EvenPartitionKeys(part, n, granule, position, window, begin, end);
    *end = std::min(*end, position);  // Drops key `position`.
  };
  const Assignment overlaps = [](int part, int n, int granule, int position, int window,
                                 int* begin, int* end) {
    paged::EvenPartitionKeys(part, n, granule, position, window, begin, end);
    if (part > 0 && *begin < *end) --*begin;  // Re-scores the previous piece's last key.
  };
  const Assignment ignores_window = [](int part, int n, int granule, int position, int,
                                       int* begin, int* end) {
    paged::EvenPartitionKeys(part, n, granule, position, 0, begin, end);
  };
  EXPECT_FALSE(CoverageError(skips_last, 4, 16, 100, 0).empty());
  EXPECT_FALSE(CoverageError(overlaps, 4, 16, 100, 0).empty());
  EXPECT_FALSE(CoverageError(ignores_window, 4, 16, 100, 37).empty());
  EXPECT_TRUE(CoverageError(kKernelAssignment, 4, 16, 100, 37).empty());
}

}  // namespace
}  // namespace tessera::kernels::gpu
