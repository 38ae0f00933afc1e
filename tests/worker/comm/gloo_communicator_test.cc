#include "worker/comm/gloo_communicator.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
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

GlooCommunicatorOptions Options(const KvStoreServer& server, const std::string& prefix, int rank,
                                int world, milliseconds timeout) {
  GlooCommunicatorOptions o;
  o.store_host = "127.0.0.1";
  o.store_port = server.port();
  o.prefix = prefix;
  o.rank = rank;
  o.world_size = world;
  o.timeout = timeout;
  return o;
}

// Forms a group of `world` ranks, each with its own Gloo device, on threads of this process.
std::vector<std::unique_ptr<GlooCommunicator>> MakeGroup(const KvStoreServer& server,
                                                         const std::string& prefix, int world,
                                                         milliseconds timeout) {
  std::vector<std::unique_ptr<GlooCommunicator>> comms(world);
  auto statuses = RunRanks(world, [&](int r) -> absl::Status {
    auto comm = GlooCommunicator::Create(Options(server, prefix, r, world, timeout));
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

class GlooWorldTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    auto server = KvStoreServer::Start("127.0.0.1", 0);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    comms_ = MakeGroup(*server_, "test", GetParam(), milliseconds(20000));
    ASSERT_EQ(comms_.size(), static_cast<size_t>(GetParam()));
  }

  std::unique_ptr<KvStoreServer> server_;
  std::vector<std::unique_ptr<GlooCommunicator>> comms_;
};

TEST_P(GlooWorldTest, AllReduceSumOfSeveralSizes) {
  const int world = GetParam();
  for (size_t count : {size_t{1}, size_t{1000}, size_t{300000}}) {
    std::vector<std::vector<float>> data(world, std::vector<float>(count));
    for (int r = 0; r < world; ++r) {
      // Small integers: every summation order gives the exact same float.
      for (size_t i = 0; i < count; ++i) data[r][i] = static_cast<float>((i % 101) + r * 1000);
    }
    auto statuses =
        RunRanks(world, [&](int r) { return comms_[r]->AllReduceSum(data[r].data(), count); });
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(statuses[r].ok()) << statuses[r];
      for (size_t i = 0; i < count; ++i) {
        const float expected =
            static_cast<float>(world * (i % 101) + 1000 * world * (world - 1) / 2);
        ASSERT_EQ(data[r][i], expected) << "count " << count << " rank " << r << " i " << i;
      }
    }
  }
}

TEST_P(GlooWorldTest, AllGather) {
  const int world = GetParam();
  constexpr size_t kCount = 1001;
  std::vector<std::vector<float>> send(world, std::vector<float>(kCount));
  std::vector<std::vector<float>> recv(world, std::vector<float>(kCount * world, -1.0f));
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < kCount; ++i) send[r][i] = static_cast<float>(r * 10000 + i);
  }
  auto statuses = RunRanks(
      world, [&](int r) { return comms_[r]->AllGather(send[r].data(), kCount, recv[r].data()); });
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    for (int src = 0; src < world; ++src) {
      for (size_t i = 0; i < kCount; ++i) {
        ASSERT_EQ(recv[r][src * kCount + i], static_cast<float>(src * 10000 + i));
      }
    }
  }
}

TEST_P(GlooWorldTest, BroadcastAndBarrier) {
  const int world = GetParam();
  const int root = world / 2;
  std::vector<std::vector<char>> buf(world, std::vector<char>(4097, 0));
  for (size_t i = 0; i < buf[root].size(); ++i) buf[root][i] = static_cast<char>(i * 31 + 7);
  auto statuses = RunRanks(world, [&](int r) -> absl::Status {
    if (absl::Status s = comms_[r]->Broadcast(buf[r].data(), buf[r].size(), root); !s.ok()) {
      return s;
    }
    return comms_[r]->Barrier();
  });
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    EXPECT_EQ(buf[r], buf[root]) << "rank " << r;
    EXPECT_FALSE(comms_[r]->aborted());
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, GlooWorldTest, ::testing::Values(2, 4));

TEST(GlooCommunicatorTest, RankThatNeverJoinsTheCollectiveFailsPeersWithoutHanging) {
  auto server = KvStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  const milliseconds timeout(1000);
  auto comms = MakeGroup(**server, "fail", 3, timeout);
  ASSERT_EQ(comms.size(), 3u);
  // Ranks 0 and 1 all-reduce; rank 2 stays away.
  std::vector<std::vector<float>> data(2, std::vector<float>(1000, 1.0f));
  const auto start = Clock::now();
  auto statuses = RunRanks(2, [&](int r) { return comms[r]->AllReduceSum(data[r].data(), 1000); });
  const auto elapsed = Clock::now() - start;
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(statuses[r].ok()) << "rank " << r;
    EXPECT_NE(statuses[r].message().find("AllReduceSum"), std::string::npos) << statuses[r];
    EXPECT_TRUE(comms[r]->aborted());
  }
  // A hang guard, not a performance check: the error must come near the timeout.
  EXPECT_LT(elapsed, timeout + std::chrono::seconds(20));
  // Later calls fail at once.
  absl::Status later = comms[0]->Barrier();
  EXPECT_EQ(later.code(), absl::StatusCode::kAborted) << later;
  EXPECT_NE(later.message().find("AllReduceSum"), std::string::npos) << later;
  // The straggler finds its peers gone and fails too, instead of hanging.
  float v = 1.0f;
  EXPECT_FALSE(comms[2]->AllReduceSum(&v, 1).ok());
  EXPECT_TRUE(comms[2]->aborted());
}

TEST(GlooCommunicatorTest, RendezvousWithMissingRankTimesOut) {
  auto server = KvStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  auto comm = GlooCommunicator::Create(Options(**server, "lonely", 0, 2, milliseconds(300)));
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(comm.status().message().find("lonely"), std::string::npos) << comm.status();
}

TEST(GlooCommunicatorTest, RejectsBadOptions) {
  auto server = KvStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(
      GlooCommunicator::Create(Options(**server, "x", 2, 2, milliseconds(100))).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      GlooCommunicator::Create(Options(**server, "", 0, 1, milliseconds(100))).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(GlooCommunicatorTest, SingleRankCollectivesAreLocal) {
  auto server = KvStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  auto comm = GlooCommunicator::Create(Options(**server, "one", 0, 1, milliseconds(1000)));
  ASSERT_TRUE(comm.ok()) << comm.status();
  float x[2] = {1.5f, 2.5f}, y[2] = {};
  EXPECT_TRUE((*comm)->AllReduceSum(x, 2).ok());
  EXPECT_EQ(x[0], 1.5f);
  EXPECT_TRUE((*comm)->AllGather(x, 2, y).ok());
  EXPECT_EQ(y[1], 2.5f);
  EXPECT_TRUE((*comm)->Barrier().ok());
}

// Rank 1 in a child process, rank 0 here: the deployment shape (one rank per process).
// The child is this binary re-executed (tests/support/child_test.h), not a bare fork:
// forking while the store server's threads run deadlocked the child's allocator under ASan.
TEST(GlooCommunicatorTest, TwoProcesses) {
  auto server = KvStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  auto child = testing::ChildTest::Start(
      "GlooCommunicatorTest.DISABLED_TwoProcessesChildRank",
      {absl::StrCat("TESSERA_TEST_STORE_PORT=", (*server)->port())});
  ASSERT_TRUE(child.ok()) << child.status();
  auto comm = GlooCommunicator::Create(Options(**server, "fork", 0, 2, milliseconds(10000)));
  ASSERT_TRUE(comm.ok()) << comm.status();
  std::vector<float> data(5000, 1.0f);
  EXPECT_TRUE((*comm)->AllReduceSum(data.data(), data.size()).ok());
  EXPECT_EQ(data[0], 3.0f);
  char msg[6] = "hello";
  EXPECT_TRUE((*comm)->Broadcast(msg, sizeof(msg), 0).ok());
  // Bounded, so a broken child cannot hang the test.
  absl::StatusOr<int> code = (*child)->Wait(std::chrono::seconds(30));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << "the child rank failed (its output is above)";
}

// Rank 1 of TwoProcesses; runs only when that test starts it.
TEST(GlooCommunicatorTest, DISABLED_TwoProcessesChildRank) {
  if (!testing::ChildTest::InChild()) GTEST_SKIP() << "started by TwoProcesses";
  const char* port = std::getenv("TESSERA_TEST_STORE_PORT");
  ASSERT_NE(port, nullptr);
  GlooCommunicatorOptions o;
  o.store_host = "127.0.0.1";
  o.store_port = std::atoi(port);
  o.prefix = "fork";
  o.rank = 1;
  o.world_size = 2;
  o.timeout = milliseconds(10000);
  auto comm = GlooCommunicator::Create(o);
  ASSERT_TRUE(comm.ok()) << comm.status();
  std::vector<float> data(5000, 2.0f);
  ASSERT_TRUE((*comm)->AllReduceSum(data.data(), data.size()).ok());
  EXPECT_EQ(data[4999], 3.0f);
  char msg[6] = {};
  ASSERT_TRUE((*comm)->Broadcast(msg, sizeof(msg), 0).ok());
  EXPECT_EQ(std::string(msg), "hello");
}

// Latency probe, not a test: run with --gtest_also_run_disabled_tests.
// Both all-reduce paths side by side, by size (the threshold's evidence):
// --gtest_also_run_disabled_tests --gtest_filter='*AllReduceLatency'.
TEST(GlooCommunicatorTest, DISABLED_AllReduceLatency) {
  auto server = KvStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  for (size_t bytes : {size_t{4} << 10, size_t{16} << 10, size_t{32} << 10, size_t{64} << 10,
                       size_t{256} << 10}) {
    const size_t count = bytes / sizeof(float);
    for (size_t gather_max : {size_t{0}, bytes}) {
      std::vector<std::unique_ptr<GlooCommunicator>> comms(2);
      RunRanks(2, [&](int r) -> absl::Status {
        GlooCommunicatorOptions options = Options(**server, absl::StrCat("latency", bytes, "-", gather_max), r, 2,
                                                  milliseconds(20000));
        options.gather_allreduce_max_bytes = gather_max;
        auto comm = GlooCommunicator::Create(options);
        if (!comm.ok()) return comm.status();
        comms[r] = std::move(*comm);
        return absl::OkStatus();
      });
      ASSERT_NE(comms[0], nullptr);
      ASSERT_NE(comms[1], nullptr);
      std::printf("gloo all-reduce 2 ranks %zu KiB, %s: %.1f us\n", bytes >> 10,
                  gather_max == 0 ? "ring" : "all-gather + sum", AllReduceMicros(comms, count, 300));
    }
  }
}

}  // namespace
}  // namespace tessera
