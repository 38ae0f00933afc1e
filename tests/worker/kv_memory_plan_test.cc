// The KV pool's size from the memory figures: --gpu-memory-utilization as vLLM means it,
// the older fixed budget and share of free memory unchanged, and every refusal naming
// its numbers.
#include "worker/service/kv_memory_plan.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

// An 80 GiB device holding 16 GiB of weights, 60 GiB free after loading them (4 GiB held
// by the CUDA context and other processes), 2 MiB KV blocks.
KvMemoryInputs Device() {
  KvMemoryInputs in;
  in.device_total_bytes = 80 * kGiB;
  in.device_free_bytes = 60 * kGiB;
  in.weight_bytes = 16 * kGiB;
  in.bytes_per_block = 2 * kMiB;
  in.activation_reserve_bytes = 2 * kGiB;
  in.blocks_per_sequence = 512;  // 8192 tokens of 16 per block.
  return in;
}

TEST(KvMemoryPlanTest, UtilizationIsTheShareOfTotalMemoryForWeightsReserveAndKv) {
  KvMemoryInputs in = Device();
  in.gpu_memory_utilization = 0.9;
  // 0.9 x 80 = 72 GiB; less 16 of weights and 2 of reserve: 54 GiB of 2 MiB blocks.
  const uint64_t budget = static_cast<uint64_t>(0.9 * static_cast<double>(80 * kGiB));
  EXPECT_EQ(*PlanKvBlocks(in), (budget - 18 * kGiB) / (2 * kMiB));
  EXPECT_EQ(*PlanKvBlocks(in), 27648u);
  // Free memory does not enter the arithmetic, only the check that it suffices.
  in.device_free_bytes = 64 * kGiB;
  EXPECT_EQ(*PlanKvBlocks(in), 27648u);
}

TEST(KvMemoryPlanTest, UtilizationOfOneTakesTheWholeDeviceWhenNothingElseHoldsIt) {
  KvMemoryInputs in = Device();
  in.device_free_bytes = 64 * kGiB;  // 80 less the 16 of weights.
  in.gpu_memory_utilization = 1.0;
  EXPECT_EQ(*PlanKvBlocks(in), (62 * kGiB) / (2 * kMiB));
}

TEST(KvMemoryPlanTest, BlocksAreCappedByWhatTheSchedulerCouldUse) {
  KvMemoryInputs in = Device();
  in.gpu_memory_utilization = 0.9;
  in.max_blocks = 1000;
  EXPECT_EQ(*PlanKvBlocks(in), 1000u);
  // And never more than a million, whatever the device.
  in.max_blocks = 0;
  in.bytes_per_block = 16;
  EXPECT_EQ(*PlanKvBlocks(in), uint64_t{1} << 20);
}

TEST(KvMemoryPlanTest, FixedBudgetWinsAsBefore) {
  KvMemoryInputs in = Device();
  in.kv_memory_bytes = 64 * kMiB;
  in.gpu_memory_utilization = 0.9;  // Ignored: the fixed budget wins.
  in.blocks_per_sequence = 4096;    // Not checked on this path (tests use tiny pools).
  EXPECT_EQ(*PlanKvBlocks(in), 32u);
  in.max_blocks = 10;
  EXPECT_EQ(*PlanKvBlocks(in), 10u);
}

TEST(KvMemoryPlanTest, FractionOfFreeMemoryAsBefore) {
  KvMemoryInputs in = Device();
  in.kv_memory_fraction = 0.25;
  EXPECT_EQ(*PlanKvBlocks(in), (15 * kGiB) / (2 * kMiB));
  in.kv_memory_fraction = 0;  // Unset: half of what is free.
  EXPECT_EQ(*PlanKvBlocks(in), (30 * kGiB) / (2 * kMiB));
  in.max_blocks = 7;
  EXPECT_EQ(*PlanKvBlocks(in), 7u);
}

TEST(KvMemoryPlanTest, UtilizationOutsideZeroToOneIsInvalid) {
  for (const double bad : {-0.5, 1.01, 2.0, std::numeric_limits<double>::quiet_NaN()}) {
    SCOPED_TRACE(bad);
    KvMemoryInputs in = Device();
    in.gpu_memory_utilization = bad;
    const absl::StatusOr<uint64_t> plan = PlanKvBlocks(in);
    ASSERT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(plan.status().message(), HasSubstr("--gpu-memory-utilization must be in (0, 1]"));
  }
}

TEST(KvMemoryPlanTest, UtilizationBelowTheWeightsNamesTheSmallestThatWorks) {
  KvMemoryInputs in = Device();
  in.gpu_memory_utilization = 0.2;  // 16 GiB: the weights alone.
  const absl::StatusOr<uint64_t> plan = PlanKvBlocks(in);
  ASSERT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  // Smallest: (16 + 2 + 513 x 2 MiB) / 80 GiB = 0.2376..., rounded up.
  EXPECT_EQ(plan.status().message(),
            "--gpu-memory-utilization 0.2 gives this worker 16.00 GiB of the device's 80.00 GiB, "
            "less than its 16.00 GiB of weights and 2.00 GiB activation reserve alone; one "
            "sequence of the full context (512 KV blocks, plus block 0) needs 1.00 GiB more; it "
            "must be at least 0.24 (or shorten the context with --max-model-len)");
}

TEST(KvMemoryPlanTest, TooFewBlocksForOneFullContextSequenceIsInvalid) {
  KvMemoryInputs in = Device();
  in.gpu_memory_utilization = 0.23;  // 18.4 GiB: 0.4 GiB (204 blocks) for the KV cache.
  const absl::StatusOr<uint64_t> plan = PlanKvBlocks(in);
  ASSERT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(),
              AllOf(HasSubstr("--gpu-memory-utilization 0.23 gives this worker 18.40 GiB of the "
                              "device's 80.00 GiB, which leaves 0.40 GiB (204 blocks)"),
                    HasSubstr("16.00 GiB of weights and 2.00 GiB activation reserve"),
                    HasSubstr("(512 KV blocks, plus block 0) needs 1.00 GiB"),
                    HasSubstr("at least 0.24")));
  // Exactly one sequence plus block 0 is enough.
  in.gpu_memory_utilization =
      static_cast<double>(18 * kGiB + 513 * 2 * kMiB) / static_cast<double>(80 * kGiB) + 1e-12;
  EXPECT_EQ(*PlanKvBlocks(in), 513u);
}

TEST(KvMemoryPlanTest, WithoutAContextTheFloorIsTwoBlocks) {
  KvMemoryInputs in = Device();
  in.blocks_per_sequence = 0;
  in.gpu_memory_utilization =
      static_cast<double>(18 * kGiB + 1 * 2 * kMiB) / static_cast<double>(80 * kGiB) + 1e-12;
  const absl::StatusOr<uint64_t> plan = PlanKvBlocks(in);
  ASSERT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("the smallest KV cache (2 blocks)"));
  EXPECT_THAT(plan.status().message(), Not(HasSubstr("--max-model-len")));
}

TEST(KvMemoryPlanTest, MoreThanOtherProcessesLeaveIsResourceExhausted) {
  KvMemoryInputs in = Device();
  in.device_free_bytes = 40 * kGiB;  // Others hold 24 GiB.
  in.gpu_memory_utilization = 0.9;
  const absl::StatusOr<uint64_t> plan = PlanKvBlocks(in);
  ASSERT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(plan.status().message(),
            "--gpu-memory-utilization 0.9 asks for 72.00 GiB of the device's 80.00 GiB, but this "
            "worker can have at most 56.00 GiB: 40.00 GiB free now plus its 16.00 GiB of weights; "
            "other processes hold the rest. Lower it to at most 0.70 or free the device");
  in.gpu_memory_utilization = 0.7;  // 56 GiB: exactly what it can have.
  EXPECT_EQ(*PlanKvBlocks(in), (38 * kGiB) / (2 * kMiB));
}

TEST(KvMemoryPlanTest, UnknownTotalCannotTakeAShare) {
  KvMemoryInputs in = Device();
  in.device_total_bytes = 0;
  in.gpu_memory_utilization = 0.9;
  EXPECT_EQ(PlanKvBlocks(in).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(KvMemoryPlanTest, ZeroByteBlocksAreAnInternalError) {
  KvMemoryInputs in = Device();
  in.bytes_per_block = 0;
  EXPECT_EQ(PlanKvBlocks(in).status().code(), absl::StatusCode::kInternal);
}

TEST(KvMemoryPlanTest, ReserveIsTheWorkspaceOnTheCpuAndAMarginMoreOnADevice) {
  EXPECT_EQ(ActivationReserveBytes(100 * kMiB, /*device_memory=*/false, 64 * kGiB), 100 * kMiB);
  // 2 % of an 80 GiB device: 1.6 GiB.
  EXPECT_EQ(ActivationReserveBytes(100 * kMiB, true, 80 * kGiB), 100 * kMiB + 80 * kGiB / 50);
  // A small device keeps the 512 MiB floor.
  EXPECT_EQ(ActivationReserveBytes(100 * kMiB, true, 16 * kGiB), 612 * kMiB);
}

}  // namespace
}  // namespace tessera
