// Where `tessera serve` puts its workers and which communicator their groups get: one GPU
// per rank with --device cuda, every rank on one GPU with --device cuda:N, where NCCL
// cannot run and auto means shm.
#include "tools/tessera/serve_placement.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(ServePlacementTest, CudaGivesWorkerIItsOwnDeviceAndKeepsAuto) {
  auto p = PlanServePlacement("cuda", "auto", /*tp=*/2, /*replicas=*/2);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->worker_devices, ElementsAre("cuda:0", "cuda:1", "cuda:2", "cuda:3"));
  EXPECT_EQ(p->communicator, "auto");  // The coordinator picks nccl for all-CUDA groups.
  EXPECT_THAT(p->note, IsEmpty());
  auto nccl = PlanServePlacement("cuda", "nccl", 2, 1);
  ASSERT_TRUE(nccl.ok()) << nccl.status();
  EXPECT_EQ(nccl->communicator, "nccl");
}

TEST(ServePlacementTest, OneDevicePutsEveryRankThereAndAutoBecomesShm) {
  for (const char* device : {"cuda:0", "cuda:1", "auto"}) {
    SCOPED_TRACE(device);
    auto p = PlanServePlacement(device, "auto", /*tp=*/4, /*replicas=*/1);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_THAT(p->worker_devices, ElementsAre(device, device, device, device));
    EXPECT_EQ(p->communicator, "shm");
    EXPECT_THAT(p->note, HasSubstr("one device"));
  }
  for (const char* communicator : {"shm", "gloo"}) {
    auto p = PlanServePlacement("cuda:0", communicator, 2, 1);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->communicator, communicator);
    EXPECT_THAT(p->note, IsEmpty());
  }
}

TEST(ServePlacementTest, RefusesNcclForRanksSharingOneDevice) {
  auto p = PlanServePlacement("cuda:0", "nccl", /*tp=*/2, /*replicas=*/1);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(p.status().message());
  EXPECT_THAT(message, HasSubstr("NCCL refuses two ranks on one device"));
  EXPECT_THAT(message, HasSubstr("--communicator shm or gloo"));
  EXPECT_THAT(message, HasSubstr("--device cuda"));
}

TEST(ServePlacementTest, OneRankPerGroupMayShareADeviceWithAnyCommunicator) {
  // tp 1: no collectives, so replicas on one device need nothing from NCCL.
  auto p = PlanServePlacement("cuda:0", "nccl", /*tp=*/1, /*replicas=*/3);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->worker_devices, ElementsAre("cuda:0", "cuda:0", "cuda:0"));
  EXPECT_EQ(p->communicator, "nccl");
}

TEST(ServePlacementTest, CpuKeepsItsDeviceAndCommunicator) {
  auto p = PlanServePlacement("cpu", "auto", 2, 1);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->worker_devices, ElementsAre("cpu", "cpu"));
  EXPECT_EQ(p->communicator, "auto");
}

TEST(ServePlacementTest, RefusesAnUnknownCommunicator) {
  auto p = PlanServePlacement("cpu", "mpi", 2, 1);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("auto, gloo, shm or nccl"));
}

}  // namespace
}  // namespace tessera::cli
