#include "worker/comm/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <functional>
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

// The worker's decode graphs: collectives queued without waiting, once eagerly and once
// into a captured graph, then the graph replayed; Wait() must bound all of it. It used to
// record its completion event inside the capture, and the query after it failed with
// "invalid argument" (seen on an H200: every tensor-parallel decode step with graphs).
TEST(NcclCommunicatorTest, QueuedCollectivesCapturedIntoAGraphAreWaitedFor) {
  REQUIRE_GPUS(1);
  auto id = GenerateNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  NcclCommunicatorOptions o;
  o.unique_id = *id;
  o.stream = stream;
  o.queue_without_waiting = true;
  auto comm = NcclCommunicator::Create(o);
  ASSERT_TRUE(comm.ok()) << comm.status();
  ASSERT_TRUE((*comm)->Capturable());
  const std::vector<float> host = {1.5f, -2.0f, 4.25f};
  float* dev = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dev), host.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dev, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);

  ASSERT_TRUE((*comm)->AllReduceSum(dev, host.size()).ok());
  ASSERT_TRUE((*comm)->Wait().ok());
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const absl::Status queued = (*comm)->AllReduceSum(dev, host.size());
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(queued.ok()) << queued;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 3; ++replay) {
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    const absl::Status waited = (*comm)->Wait();
    ASSERT_TRUE(waited.ok()) << "replay " << replay << ": " << waited;
  }
  std::vector<float> out(host.size());
  ASSERT_EQ(cudaMemcpy(out.data(), dev, out.size() * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(out, host);  // One rank: the sum is the value itself.
  EXPECT_FALSE((*comm)->aborted());
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(dev);
  cudaStreamDestroy(stream);
}

// Runs `body` on ranks 0 and 1 of a fresh two-rank group, one thread and device each;
// per rank, the communicator's creation error or what `body` returned.
std::vector<absl::Status> RunOnTwoDevices(
    const std::function<absl::Status(int rank, NcclCommunicator& comm)>& body) {
  auto id = GenerateNcclUniqueId();
  if (!id.ok()) return {id.status(), id.status()};
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
      statuses[r] = comm.ok() ? body(r, **comm) : comm.status();
    });
  }
  for (auto& t : threads) t.join();
  return statuses;
}

TEST(NcclCommunicatorTest, TwoRanksOnTwoDevicesAllReduce) {
  REQUIRE_GPUS(2);
  std::vector<float> results(2, 0.0f);
  const std::vector<absl::Status> statuses = RunOnTwoDevices([&](int r, NcclCommunicator& comm) {
    float* dev = nullptr;
    cudaMalloc(reinterpret_cast<void**>(&dev), sizeof(float));
    const float v = static_cast<float>(r + 1);
    cudaMemcpy(dev, &v, sizeof(float), cudaMemcpyHostToDevice);
    const absl::Status s = comm.AllReduceSum(dev, 1);
    cudaMemcpy(&results[r], dev, sizeof(float), cudaMemcpyDeviceToHost);
    cudaFree(dev);
    return s;
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    EXPECT_EQ(results[r], 3.0f);
  }
}

// BF16 activations (the CUDA backend's default) all-reduced as ncclBfloat16: exact for
// small integers; other 16-bit dtypes are refused without aborting the group.
TEST(NcclCommunicatorTest, TwoRanksAllReduceBf16) {
  REQUIRE_GPUS(2);
  std::vector<std::vector<uint16_t>> results(2);
  std::vector<absl::Status> refused(2);
  const std::vector<absl::Status> statuses = RunOnTwoDevices([&](int r, NcclCommunicator& comm) {
    // BF16 bits of 1, 2, 3 (rank 0) and 2, 4, 6 (rank 1): sums 3, 6, 9.
    const std::vector<uint16_t> mine = r == 0 ? std::vector<uint16_t>{0x3f80, 0x4000, 0x4040}
                                              : std::vector<uint16_t>{0x4000, 0x4080, 0x40c0};
    uint16_t* dev = nullptr;
    cudaMalloc(reinterpret_cast<void**>(&dev), mine.size() * sizeof(uint16_t));
    cudaMemcpy(dev, mine.data(), mine.size() * sizeof(uint16_t), cudaMemcpyHostToDevice);
    const absl::Status s = comm.AllReduceSum(dev, mine.size(), DType::kBF16);
    refused[r] = comm.AllReduceSum(dev, mine.size(), DType::kF16);
    results[r].resize(mine.size());
    cudaMemcpy(results[r].data(), dev, mine.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost);
    EXPECT_FALSE(comm.aborted());
    cudaFree(dev);
    return s;
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    EXPECT_EQ(results[r], (std::vector<uint16_t>{0x4040, 0x40c0, 0x4110}));
    EXPECT_EQ(refused[r].code(), absl::StatusCode::kUnimplemented) << refused[r];
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
