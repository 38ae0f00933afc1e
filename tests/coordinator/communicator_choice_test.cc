// Which communicator a group gets (coordinator/cluster/communicator_choice.h).
#include "coordinator/cluster/communicator_choice.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

RankPlacement Cpu(const std::string& host) { return {host, "cpu", ""}; }
RankPlacement Gpu(const std::string& host, const std::string& bus) { return {host, "cuda", bus}; }

std::string Choose(const std::string& requested, const std::vector<RankPlacement>& ranks) {
  absl::StatusOr<std::string> c = ChooseCommunicator(requested, ranks, 0);
  return c.ok() ? *c : std::string(c.status().message());
}

TEST(CommunicatorChoiceTest, OneRankNeedsNone) {
  EXPECT_EQ(Choose("auto", {Cpu("a")}), "single");
  EXPECT_EQ(Choose("nccl", {Gpu("a", "0000:1b:00.0")}), "single");
}

TEST(CommunicatorChoiceTest, AutoPicksSharedMemoryOnOneHostAndGlooAcrossHosts) {
  EXPECT_EQ(Choose("auto", {Cpu("a"), Cpu("a")}), "shm");
  EXPECT_EQ(Choose("auto", {Cpu("a"), Cpu("b")}), "gloo");
  EXPECT_EQ(Choose("gloo", {Cpu("a"), Cpu("a")}), "gloo");
}

TEST(CommunicatorChoiceTest, AutoPicksNcclWhenEveryRankHasItsOwnGpu) {
  EXPECT_EQ(Choose("auto", {Gpu("a", "0000:1b:00.0"), Gpu("a", "0000:1c:00.0")}), "nccl");
  // The same bus id on two hosts is two devices.
  EXPECT_EQ(Choose("auto", {Gpu("a", "0000:1b:00.0"), Gpu("b", "0000:1b:00.0")}), "nccl");
  // Workers that report no bus id (older builds) keep today's choice.
  EXPECT_EQ(Choose("auto", {Gpu("a", ""), Gpu("a", "")}), "nccl");
}

TEST(CommunicatorChoiceTest, RanksSharingAGpuStageThroughTheHost) {
  const std::vector<RankPlacement> shared = {Gpu("a", "0000:1b:00.0"), Gpu("a", "0000:1b:00.0")};
  EXPECT_EQ(Choose("auto", shared), "shm");
  EXPECT_EQ(Choose("gloo", shared), "gloo");
  const std::vector<RankPlacement> two_hosts = {Gpu("a", "0000:1b:00.0"),
                                                Gpu("a", "0000:1b:00.0"), Gpu("b", "0000:1b:00.0")};
  EXPECT_EQ(Choose("auto", two_hosts), "gloo");
  const std::string refused = Choose("nccl", shared);
  EXPECT_NE(refused.find("ranks 0 and 1 share the GPU at PCI bus id 0000:1b:00.0 on a"),
            std::string::npos)
      << refused;
  EXPECT_NE(refused.find("--communicator shm or gloo"), std::string::npos) << refused;
}

TEST(CommunicatorChoiceTest, AGroupOfGpuAndCpuRanksIsRefused) {
  const absl::StatusOr<std::string> c =
      ChooseCommunicator("auto", {Gpu("a", "0000:1b:00.0"), Cpu("a")}, 3);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(c.status().message().find("replica 3: 1 of its 2 workers registered a CUDA device"),
            std::string::npos)
      << c.status();
}

}  // namespace
}  // namespace tessera
