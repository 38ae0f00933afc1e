#include "worker/comm/shm_communicator.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/rendezvous/kv_store_server.h"
#include "gtest/gtest.h"
#include "tests/support/child_test.h"
#include "tests/worker/comm/rank_threads.h"

namespace tessera {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

ShmCommunicatorOptions Options(const KvStoreServer& server, const std::string& prefix, int rank,
                               int world, milliseconds timeout, size_t slot_bytes) {
  ShmCommunicatorOptions o;
  o.store_port = server.port();
  o.prefix = prefix;
  o.rank = rank;
  o.world_size = world;
  o.timeout = timeout;
  o.slot_bytes = slot_bytes;
  return o;
}

std::vector<std::unique_ptr<ShmCommunicator>> MakeGroup(const KvStoreServer& server, int world,
                                                        milliseconds timeout,
                                                        size_t slot_bytes = 1 << 20) {
  std::vector<std::unique_ptr<ShmCommunicator>> comms(world);
  auto statuses = RunRanks(world, [&](int r) -> absl::Status {
    auto comm = ShmCommunicator::Create(Options(server, "g", r, world, timeout, slot_bytes));
    if (!comm.ok()) return comm.status();
    comms[r] = std::move(*comm);
    return absl::OkStatus();
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    if (!statuses[r].ok()) return {};
  }
  return comms;
}

// Order-sensitive values: only a rank-order sum reproduces `expected` exactly.
float Value(int rank, size_t i) {
  const float magnitudes[] = {1e8f, 1.0f, -1e8f, 3.0f};
  return magnitudes[rank % 4] * (1.0f + static_cast<float>(i % 7) * 0.125f);
}

class ShmWorldTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    auto server = KvStoreServer::Start("127.0.0.1", 0);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    // A small slot so the larger collectives below run in many chunks.
    comms_ = MakeGroup(*server_, GetParam(), milliseconds(20000), /*slot_bytes=*/256);
    ASSERT_EQ(comms_.size(), static_cast<size_t>(GetParam()));
  }

  std::unique_ptr<KvStoreServer> server_;
  std::vector<std::unique_ptr<ShmCommunicator>> comms_;
};

TEST_P(ShmWorldTest, AllReduceSumsInRankOrderAcrossChunks) {
  const int world = GetParam();
  for (size_t count : {size_t{0}, size_t{1}, size_t{1000}}) {
    std::vector<std::vector<float>> data(world, std::vector<float>(count));
    std::vector<float> expected(count);
    for (size_t i = 0; i < count; ++i) {
      for (int r = 0; r < world; ++r) data[r][i] = Value(r, i);
      float sum = Value(0, i);
      for (int r = 1; r < world; ++r) sum += Value(r, i);
      expected[i] = sum;
    }
    auto statuses =
        RunRanks(world, [&](int r) { return comms_[r]->AllReduceSum(data[r].data(), count); });
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(statuses[r].ok()) << statuses[r];
      // Bit-exact; count 0 skips memcmp, whose pointers (an empty vector's data()) may be
      // null, which is undefined even for 0 bytes.
      ASSERT_TRUE(count == 0 || std::memcmp(data[r].data(), expected.data(), count * sizeof(float)) == 0)
          << "rank " << r << " count " << count;
    }
  }
}

TEST_P(ShmWorldTest, AllGatherInPlaceAndBroadcast) {
  const int world = GetParam();
  constexpr size_t kCount = 333;
  std::vector<std::vector<float>> buf(world, std::vector<float>(kCount * world, -1.0f));
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < kCount; ++i) buf[r][r * kCount + i] = static_cast<float>(r * 1000 + i);
  }
  const int root = world - 1;
  std::vector<std::vector<char>> bytes(world, std::vector<char>(1001, 0));
  for (size_t i = 0; i < bytes[root].size(); ++i) bytes[root][i] = static_cast<char>(i * 13);
  auto statuses = RunRanks(world, [&](int r) -> absl::Status {
    absl::Status s = comms_[r]->AllGather(buf[r].data() + r * kCount, kCount, buf[r].data());
    if (!s.ok()) return s;
    s = comms_[r]->Broadcast(bytes[r].data(), bytes[r].size(), root);
    if (!s.ok()) return s;
    return comms_[r]->Barrier();
  });
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    for (int src = 0; src < world; ++src) {
      for (size_t i = 0; i < kCount; ++i) {
        ASSERT_EQ(buf[r][src * kCount + i], static_cast<float>(src * 1000 + i));
      }
    }
    EXPECT_EQ(bytes[r], bytes[root]);
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, ShmWorldTest, ::testing::Values(1, 2, 4));

TEST(ShmCommunicatorTest, MissingRankTimesOutAndAbortsEveryone) {
  auto server = KvStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  auto comms = MakeGroup(**server, 3, milliseconds(200));
  ASSERT_EQ(comms.size(), 3u);
  std::vector<float> data(2, 1.0f);
  auto statuses = RunRanks(2, [&](int r) { return comms[r]->AllReduceSum(&data[r], 1); });
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(statuses[r].ok()) << "rank " << r;
    EXPECT_NE(statuses[r].message().find("AllReduceSum"), std::string::npos) << statuses[r];
  }
  // At least one rank saw the deadline itself; the other may have been woken by its abort.
  EXPECT_TRUE(statuses[0].code() == absl::StatusCode::kDeadlineExceeded ||
              statuses[1].code() == absl::StatusCode::kDeadlineExceeded);
  for (const auto& c : comms) EXPECT_TRUE(c->aborted());
  float v = 1.0f;
  EXPECT_EQ(comms[2]->AllReduceSum(&v, 1).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(comms[0]->Barrier().code(), absl::StatusCode::kAborted);
}

TEST(ShmCommunicatorTest, AbortEndsACollectiveWaitingForADeadPeer) {
  auto server = KvStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  auto comms = MakeGroup(**server, 2, milliseconds(30000));
  ASSERT_EQ(comms.size(), 2u);
  // Rank 1 never arrives (its process died); another thread of rank 0 aborts the group.
  const auto start = Clock::now();
  std::thread aborter([&] {
    std::this_thread::sleep_for(milliseconds(100));
    comms[0]->Abort();
  });
  float v = 1.0f;
  const absl::Status s = comms[0]->AllReduceSum(&v, 1);
  aborter.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_LT(Clock::now() - start, milliseconds(5000)) << "ended by the abort, not the 30 s timeout";
  EXPECT_TRUE(comms[0]->aborted());
  EXPECT_TRUE(comms[1]->aborted()) << "the flag is in the shared segment";
}

TEST(ShmCommunicatorTest, MismatchedCollectivesFailOnEveryRank) {
  auto server = KvStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  auto comms = MakeGroup(**server, 2, milliseconds(5000));
  ASSERT_EQ(comms.size(), 2u);
  std::vector<float> a(4, 1.0f), b(8, 1.0f);
  auto statuses = RunRanks(2, [&](int r) {
    return r == 0 ? comms[0]->AllReduceSum(a.data(), a.size())
                  : comms[1]->AllReduceSum(b.data(), b.size());
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(statuses[r].code(), absl::StatusCode::kInvalidArgument) << statuses[r];
    EXPECT_NE(statuses[r].message().find("mismatch"), std::string::npos) << statuses[r];
  }
}

// Rank 1 in a child process: the deployment shape. The child is this binary re-executed
// (tests/support/child_test.h), not a bare fork, since the store server's threads are
// already running and a forked child could deadlock on a lock one of them held.
TEST(ShmCommunicatorTest, TwoProcesses) {
  auto server = KvStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  auto child = testing::ChildTest::Start(
      "ShmCommunicatorTest.DISABLED_TwoProcessesChildRank",
      {absl::StrCat("TESSERA_TEST_STORE_PORT=", (*server)->port())});
  ASSERT_TRUE(child.ok()) << child.status();
  auto comm = ShmCommunicator::Create(Options(**server, "fork", 0, 2, milliseconds(10000), 4096));
  ASSERT_TRUE(comm.ok()) << comm.status();
  std::vector<float> data(5000, 1.0f);
  EXPECT_TRUE((*comm)->AllReduceSum(data.data(), data.size()).ok());
  EXPECT_EQ(data[0], 3.0f);
  absl::StatusOr<int> code = (*child)->Wait(std::chrono::seconds(30));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << "the child rank failed (its output is above)";
}

// Rank 1 of TwoProcesses; runs only when that test starts it.
TEST(ShmCommunicatorTest, DISABLED_TwoProcessesChildRank) {
  if (!testing::ChildTest::InChild()) GTEST_SKIP() << "started by TwoProcesses";
  const char* port = std::getenv("TESSERA_TEST_STORE_PORT");
  ASSERT_NE(port, nullptr);
  ShmCommunicatorOptions o;
  o.store_port = std::atoi(port);
  o.prefix = "fork";
  o.rank = 1;
  o.world_size = 2;
  o.timeout = milliseconds(10000);
  o.slot_bytes = 4096;
  auto comm = ShmCommunicator::Create(o);
  ASSERT_TRUE(comm.ok()) << comm.status();
  std::vector<float> data(5000, 2.0f);
  ASSERT_TRUE((*comm)->AllReduceSum(data.data(), data.size()).ok());
  EXPECT_EQ(data[4999], 3.0f);
}

// Latency probe, not a test: run with --gtest_also_run_disabled_tests.
TEST(ShmCommunicatorTest, DISABLED_AllReduceLatency) {
  auto server = KvStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  auto comms = MakeGroup(**server, 2, milliseconds(20000));
  ASSERT_EQ(comms.size(), 2u);
  for (size_t bytes : {size_t{8} << 10, size_t{256} << 10}) {
    std::printf("shm all-reduce 2 ranks %zu KiB: %.1f us\n", bytes >> 10,
                AllReduceMicros(comms, bytes / sizeof(float), 500));
  }
}

}  // namespace
}  // namespace tessera
