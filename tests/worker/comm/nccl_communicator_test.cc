#include "worker/comm/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

using std::chrono::milliseconds;

int DeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

#define REQUIRE_GPUS(n)                                                            \
  do {                                                                             \
    if (DeviceCount() < (n)) GTEST_SKIP() << "needs " << (n) << " CUDA device(s)"; \
  } while (0)

TEST(NcclCommunicatorTest, UniqueIdIs128Bytes) {
  REQUIRE_GPUS(1);
  auto id = GenerateNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->size(), 128u);
}

TEST(NcclCommunicatorTest, RejectsMalformedUniqueId) {
  REQUIRE_GPUS(1);
  NcclCommunicatorOptions o;
  o.unique_id = "short";
  EXPECT_EQ(NcclCommunicator::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NcclCommunicatorTest, SingleRankCollectivesOnDevice) {
  REQUIRE_GPUS(1);
  auto id = GenerateNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  NcclCommunicatorOptions o;
  o.unique_id = *id;
  o.timeout = milliseconds(30000);
  auto comm = NcclCommunicator::Create(o);
  ASSERT_TRUE(comm.ok()) << comm.status();
  std::vector<float> host = {1.0f, 2.0f, 3.0f};
  float* dev = nullptr;
  float* gathered = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dev), host.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&gathered), host.size() * sizeof(float)),
            cudaSuccess);
  cudaMemcpy(dev, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);
  EXPECT_TRUE((*comm)->AllReduceSum(dev, host.size()).ok());
  EXPECT_TRUE((*comm)->AllGather(dev, host.size(), gathered).ok());
  EXPECT_TRUE((*comm)->Broadcast(dev, host.size() * sizeof(float), 0).ok());
  EXPECT_TRUE((*comm)->Barrier().ok());
  std::vector<float> out(host.size());
  cudaMemcpy(out.data(), gathered, out.size() * sizeof(float), cudaMemcpyDeviceToHost);
  EXPECT_EQ(out, host);
  EXPECT_FALSE((*comm)->aborted());
  cudaFree(dev);
  cudaFree(gathered);
}

TEST(NcclCommunicatorTest, TwoRanksOnTwoDevicesAllReduce) {
  REQUIRE_GPUS(2);
  auto id = GenerateNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<float> results(2, 0.0f);
  std::vector<absl::Status> statuses(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      NcclCommunicatorOptions o;
      o.unique_id = *id;
      o.rank = r;
      o.world_size = 2;
      o.device = r;
      o.timeout = milliseconds(60000);
      auto comm = NcclCommunicator::Create(o);
      if (!comm.ok()) {
        statuses[r] = comm.status();
        return;
      }
      float* dev = nullptr;
      cudaMalloc(reinterpret_cast<void**>(&dev), sizeof(float));
      const float v = static_cast<float>(r + 1);
      cudaMemcpy(dev, &v, sizeof(float), cudaMemcpyHostToDevice);
      statuses[r] = (*comm)->AllReduceSum(dev, 1);
      cudaMemcpy(&results[r], dev, sizeof(float), cudaMemcpyDeviceToHost);
      cudaFree(dev);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    EXPECT_EQ(results[r], 3.0f);
  }
}

// Rank 1 never joins: init must give up after the timeout instead of hanging.
TEST(NcclCommunicatorTest, InitWithMissingPeerTimesOut) {
  REQUIRE_GPUS(1);
  auto id = GenerateNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  NcclCommunicatorOptions o;
  o.unique_id = *id;
  o.rank = 0;
  o.world_size = 2;
  o.timeout = milliseconds(2000);
  auto comm = NcclCommunicator::Create(o);
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded) << comm.status();
}

}  // namespace
}  // namespace tessera
