// The front door holds many streams on a fixed number of threads (issue 12, item 4): 1,000
// GenerateStream calls open at once against one coordinator on gRPC's callback API must
// all end OK with every token, while the coordinator's thread count (from /proc) stays
// under a fixed bound that does not grow with the number of streams. A test of behaviour,
// not timing; tessera-front-door-bench measures the same at 5,000 streams.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "benchmarks/serving/stream_swarm.h"
#include "gtest/gtest.h"
#include "tests/e2e/serving_util.h"

namespace tessera::testing {
namespace {

constexpr int kStreams = 1000;
constexpr int kMaxNewTokens = 16;
// The synchronous server needed one thread per stream (1,000 streams: 21 -> 1,020).
constexpr int kThreadBound = 64;

TEST(FrontDoorScaleTest, ThousandStreamsEndOkOnBoundedThreads) {
  TESSERA_REQUIRE_STORIES_MODEL();
  ClusterOptions options;
  options.kv_memory_mb = 96;  // Room for every stream's blocks at once.
  options.max_num_seqs = kStreams;
  options.coordinator_flags = {absl::StrCat("--max-concurrent-streams=", kStreams + 100),
                               "--max-num-batched-tokens=16384"};
  auto cluster = StartStories(/*tp=*/1, 1, options);
  ASSERT_NE(cluster, nullptr);
  const int pid = cluster->coordinator().pid;
  const bench::ProcessSample before = bench::SampleProcess(pid);
  ASSERT_GT(before.threads, 0);

  std::atomic<bool> done{false};
  std::atomic<int> peak_threads{before.threads};
  std::thread sampler([&] {
    while (!done.load()) {
      const int t = bench::SampleProcess(pid).threads;
      if (t > peak_threads.load()) peak_threads.store(t);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  bench::SwarmOptions swarm;
  swarm.address = cluster->address();
  swarm.num_streams = kStreams;
  swarm.max_new_tokens = kMaxNewTokens;
  swarm.deadline = std::chrono::seconds(150);
  const bench::SwarmResult result = bench::RunSwarm(swarm);
  done.store(true);
  sampler.join();

  int ok = 0;
  std::map<int, int> by_code;
  for (const bench::StreamOutcome& o : result.outcomes) {
    if (o.finished_ok && o.tokens == kMaxNewTokens) {
      ++ok;
    } else {
      ++by_code[static_cast<int>(o.code)];
      if (by_code[static_cast<int>(o.code)] == 1) {
        ADD_FAILURE() << "stream ended with code " << o.code << " (" << o.message << ") after " << o.tokens
                      << " tokens";
      }
    }
  }
  std::printf("%d streams: %d OK in %.1f s; coordinator threads %d before, %d peak\n", kStreams, ok,
              result.wall_s, before.threads, peak_threads.load());
  EXPECT_EQ(ok, kStreams);
  EXPECT_LT(peak_threads.load(), kThreadBound);
  // Still serving afterwards.
  EXPECT_TRUE(RunUnary(cluster->api(), GreedyText("Once", 4)).status.ok());
}

}  // namespace
}  // namespace tessera::testing
