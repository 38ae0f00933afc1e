#include "worker/comm/local_communicator.h"

#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

using std::chrono::milliseconds;

// Runs fn(rank) on one thread per rank and returns each rank's status.
std::vector<absl::Status> RunRanks(int world, const std::function<absl::Status(int)>& fn) {
  std::vector<absl::Status> statuses(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] { statuses[r] = fn(r); });
  }
  for (auto& t : threads) t.join();
  return statuses;
}

// Values whose float sum depends on the order of additions, so a rank-order sum is
// distinguishable from any other order.
float Value(int rank, size_t i) {
  const float magnitudes[] = {1e8f, 1.0f, -1e8f, 3.0f};
  return magnitudes[rank % 4] * (1.0f + static_cast<float>(i % 7) * 0.125f);
}

class LocalCommunicatorWorldTest : public ::testing::TestWithParam<int> {};

TEST_P(LocalCommunicatorWorldTest, AllReduceSumsInRankOrderOnEveryRank) {
  const int world = GetParam();
  auto comms = MakeLocalCommunicators(world, milliseconds(5000));
  constexpr size_t kCount = 1000;
  std::vector<std::vector<float>> data(world, std::vector<float>(kCount));
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < kCount; ++i) data[r][i] = Value(r, i);
  }
  std::vector<float> expected(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    float sum = Value(0, i);
    for (int r = 1; r < world; ++r) sum += Value(r, i);
    expected[i] = sum;
  }
  auto statuses =
      RunRanks(world, [&](int r) { return comms[r]->AllReduceSum(data[r].data(), kCount); });
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    for (size_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(std::memcmp(&data[r][i], &expected[i], sizeof(float)), 0)
          << "rank " << r << " element " << i << ": " << data[r][i] << " vs " << expected[i];
    }
  }
}

TEST_P(LocalCommunicatorWorldTest, AllGatherPlacesEachRankInItsSlot) {
  const int world = GetParam();
  auto comms = MakeLocalCommunicators(world, milliseconds(5000));
  constexpr size_t kCount = 17;
  std::vector<std::vector<float>> send(world, std::vector<float>(kCount));
  std::vector<std::vector<float>> recv(world, std::vector<float>(kCount * world, -1.0f));
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < kCount; ++i) send[r][i] = static_cast<float>(r * 100 + i);
  }
  auto statuses = RunRanks(
      world, [&](int r) { return comms[r]->AllGather(send[r].data(), kCount, recv[r].data()); });
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    for (int src = 0; src < world; ++src) {
      for (size_t i = 0; i < kCount; ++i) {
        EXPECT_EQ(recv[r][src * kCount + i], static_cast<float>(src * 100 + i));
      }
    }
  }
}

TEST_P(LocalCommunicatorWorldTest, AllGatherInPlaceFromOwnSlot) {
  const int world = GetParam();
  auto comms = MakeLocalCommunicators(world, milliseconds(5000));
  constexpr size_t kCount = 5;
  std::vector<std::vector<float>> buf(world, std::vector<float>(kCount * world, -1.0f));
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < kCount; ++i) buf[r][r * kCount + i] = static_cast<float>(r + 10 * i);
  }
  auto statuses = RunRanks(world, [&](int r) {
    return comms[r]->AllGather(buf[r].data() + r * kCount, kCount, buf[r].data());
  });
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    for (int src = 0; src < world; ++src) {
      for (size_t i = 0; i < kCount; ++i) {
        EXPECT_EQ(buf[r][src * kCount + i], static_cast<float>(src + 10 * i));
      }
    }
  }
}

TEST_P(LocalCommunicatorWorldTest, BroadcastCopiesRootBytes) {
  const int world = GetParam();
  auto comms = MakeLocalCommunicators(world, milliseconds(5000));
  const int root = world - 1;
  std::vector<std::vector<char>> buf(world, std::vector<char>(33, 'x'));
  for (size_t i = 0; i < buf[root].size(); ++i) buf[root][i] = static_cast<char>(i * 7);
  auto statuses = RunRanks(
      world, [&](int r) { return comms[r]->Broadcast(buf[r].data(), buf[r].size(), root); });
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    EXPECT_EQ(buf[r], buf[root]) << "rank " << r;
  }
}

TEST_P(LocalCommunicatorWorldTest, ManyCollectivesInSequence) {
  const int world = GetParam();
  auto comms = MakeLocalCommunicators(world, milliseconds(5000));
  std::vector<float> totals(world, 0.0f);
  auto statuses = RunRanks(world, [&](int r) -> absl::Status {
    for (int step = 0; step < 200; ++step) {
      float v = static_cast<float>(r + step);
      if (absl::Status s = comms[r]->AllReduceSum(&v, 1); !s.ok()) return s;
      totals[r] += v;
      if (absl::Status s = comms[r]->Barrier(); !s.ok()) return s;
    }
    return absl::OkStatus();
  });
  float expected = 0.0f;
  for (int step = 0; step < 200; ++step) {
    float v = 0.0f;
    for (int r = 0; r < world; ++r) v += static_cast<float>(r + step);
    expected += v;
  }
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    EXPECT_EQ(totals[r], expected);
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, LocalCommunicatorWorldTest, ::testing::Values(1, 2, 4));

// The typed all-reduce: kF32 is the float one; other dtypes are refused without breaking
// the group (only NCCL reduces BF16: the CPU backend's activations are float32).
TEST(LocalCommunicatorTest, TypedAllReduceForwardsF32AndRefusesBf16) {
  auto comms = MakeLocalCommunicators(2, milliseconds(5000));
  std::vector<std::vector<float>> data = {{1.0f, 2.0f}, {10.0f, 20.0f}};
  auto statuses = RunRanks(2, [&](int r) {
    return comms[r]->AllReduceSum(data[r].data(), data[r].size(), DType::kF32);
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    EXPECT_EQ(data[r], (std::vector<float>{11.0f, 22.0f}));
  }
  uint16_t bf16[2] = {0, 0};
  const absl::Status refused = comms[0]->AllReduceSum(bf16, 2, DType::kBF16);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnimplemented) << refused;
  EXPECT_NE(refused.message().find("BF16"), absl::string_view::npos) << refused;
  EXPECT_FALSE(comms[0]->aborted());
  SingleRankCommunicator single;
  EXPECT_TRUE(single.AllReduceSum(bf16, 2, DType::kBF16).ok());
}

TEST(LocalCommunicatorTest, MissingRankTimesOutAndAbortsTheGroup) {
  auto comms = MakeLocalCommunicators(4, milliseconds(200));
  // Rank 3 never calls the collective.
  std::vector<float> data(3, 1.0f);
  auto statuses = RunRanks(3, [&](int r) { return comms[r]->AllReduceSum(&data[r], 1); });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(statuses[r].code(), absl::StatusCode::kDeadlineExceeded) << statuses[r];
    EXPECT_NE(statuses[r].message().find("AllReduceSum"), std::string::npos) << statuses[r];
    EXPECT_NE(statuses[r].message().find("200 ms"), std::string::npos) << statuses[r];
    EXPECT_NE(statuses[r].message().find("rank(s) 3"), std::string::npos) << statuses[r];
  }
  for (const auto& comm : comms) EXPECT_TRUE(comm->aborted());
  // Every later call fails at once, including on the rank that never arrived.
  float v = 1.0f;
  absl::Status late = comms[3]->AllReduceSum(&v, 1);
  EXPECT_EQ(late.code(), absl::StatusCode::kAborted) << late;
  EXPECT_NE(late.message().find("never arrived"), std::string::npos) << late;
  EXPECT_EQ(comms[0]->Barrier().code(), absl::StatusCode::kAborted);
}

TEST(LocalCommunicatorTest, MismatchedCollectivesAbort) {
  auto comms = MakeLocalCommunicators(2, milliseconds(5000));
  std::vector<float> a(4, 1.0f), b(8, 1.0f);
  auto statuses = RunRanks(2, [&](int r) {
    return r == 0 ? comms[0]->AllReduceSum(a.data(), a.size())
                  : comms[1]->AllReduceSum(b.data(), b.size());
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(statuses[r].ok());
    EXPECT_NE(statuses[r].message().find("mismatch"), std::string::npos) << statuses[r];
  }
  EXPECT_TRUE(comms[0]->aborted());
  EXPECT_EQ(a[0], 1.0f);  // Nothing was written.
}

TEST(LocalCommunicatorTest, BadBroadcastRootAbortsWaitingPeers) {
  auto comms = MakeLocalCommunicators(2, milliseconds(5000));
  char buf[4] = {};
  auto statuses = RunRanks(2, [&](int r) { return comms[r]->Broadcast(buf, 4, r == 0 ? 0 : 5); });
  EXPECT_FALSE(statuses[0].ok());
  EXPECT_EQ(statuses[1].code(), absl::StatusCode::kInvalidArgument) << statuses[1];
  EXPECT_TRUE(comms[0]->aborted());
}

}  // namespace
}  // namespace tessera
