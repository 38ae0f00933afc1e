#include "coordinator/scheduler/capacity.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::sched {
namespace {

using ::testing::HasSubstr;

TEST(CapacityTest, ReplicaHasTheBlocksOfItsSmallestRank) {
  std::vector<WorkerCapacity> reports = {{"w0", 1200}, {"w1", 1100}, {"w2", 1300}};
  auto blocks = ReplicaNumBlocks(reports);
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  EXPECT_EQ(*blocks, 1100);
}

TEST(CapacityTest, RejectsNoReportsOrAnEmptyRank) {
  EXPECT_EQ(ReplicaNumBlocks({}).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<WorkerCapacity> reports = {{"w0", 1200}, {"10.0.0.7:50051", 0}};
  auto blocks = ReplicaNumBlocks(reports);
  ASSERT_FALSE(blocks.ok());
  EXPECT_THAT(std::string(blocks.status().message()), HasSubstr("10.0.0.7:50051"));
  EXPECT_THAT(std::string(blocks.status().message()), HasSubstr("reported 0"));
}

}  // namespace
}  // namespace tessera::sched
