// Overload end to end (issue 12, item 3): bounded per-replica queues refuse at once with
// RESOURCE_EXHAUSTED (counted in metrics), admitted requests finish, and a request whose
// deadline passes while it waits never starts.

#include <atomic>
#include <chrono>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/e2e/http_get.h"
#include "tests/e2e/serving_util.h"

namespace tessera::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The value of the first sample of `name` whose labels contain `label`; -1 when absent.
double MetricValue(const std::string& metrics, const std::string& name, const std::string& label) {
  for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
    if (!absl::StartsWith(line, name + "{") || !absl::StrContains(line, label)) continue;
    double v = -1;
    if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) return v;
  }
  return -1;
}

std::string CoordinatorLog(const Cluster& cluster) {
  std::ifstream in(cluster.coordinator().log, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(OverloadTest, FullQueuesRefuseAtOnceAndAdmittedRequestsFinish) {
  TESSERA_REQUIRE_STORIES_MODEL();
  ClusterOptions options;
  options.max_num_seqs = 2;
  options.coordinator_flags = {"--max-queued-requests=4"};
  auto cluster = StartStories(/*tp=*/1, /*replicas=*/1, options);
  ASSERT_NE(cluster, nullptr);

  constexpr int kClients = 48;
  struct Outcome {
    grpc::Status status;
    int tokens = 0;
    double seconds = 0;
  };
  std::vector<Outcome> outcomes(kClients);
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      while (!go.load()) std::this_thread::yield();
      const auto start = Clock::now();
      const UnaryResult r = RunUnary(cluster->api(), GreedyText("Once upon a time", 200), std::chrono::seconds(60));
      outcomes[i] = {r.status, r.response.token_ids_size(), std::chrono::duration<double>(Clock::now() - start).count()};
    });
  }
  go = true;
  for (std::thread& t : threads) t.join();

  int admitted = 0, refused = 0;
  double slowest_refusal = 0;
  for (const Outcome& o : outcomes) {
    if (o.status.ok()) {
      ++admitted;
      EXPECT_EQ(o.tokens, 200);
    } else if (o.status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++refused;
      EXPECT_TRUE(absl::StrContains(o.status.error_message(), "queue is full")) << o.status.error_message();
      slowest_refusal = std::max(slowest_refusal, o.seconds);
    } else {
      ADD_FAILURE() << "unexpected status " << o.status.error_code() << ": " << o.status.error_message();
    }
  }
  std::printf("%d simultaneous requests, 2 seats + 4 queue slots: %d admitted, %d refused (slowest refusal %.3f s)\n",
              kClients, admitted, refused, slowest_refusal);
  // At least the queue (requests not yet scheduled count against it even when seats are
  // free: a burst can arrive before the next step starts any of them).
  EXPECT_GE(admitted, 4);
  EXPECT_GE(refused, kClients / 2);
  EXPECT_LT(slowest_refusal, 1.0) << "refusals must not wait for the queue";
  const std::string metrics = HttpGet(cluster->metrics_port(), "/metrics").body;
  EXPECT_EQ(MetricValue(metrics, "tessera_rejected_requests_total", "reason=\"queue_full\""), refused) << metrics;
}

TEST(OverloadTest, RequestWhoseDeadlinePassesInTheQueueNeverStarts) {
  TESSERA_REQUIRE_STORIES_MODEL();
  ClusterOptions options;
  options.max_num_seqs = 1;
  auto cluster = StartStories(/*tp=*/1, /*replicas=*/1, options);
  ASSERT_NE(cluster, nullptr);
  // The only seat is taken for a while (500 tokens take ~0.5 s here).
  std::thread blocker([&] {
    v1::GenerateRequest r = GreedyText("Once upon a time", 500);
    r.set_request_id("blocker");
    EXPECT_TRUE(RunUnary(cluster->api(), r).status.ok());
  });
  ASSERT_TRUE([&] {
    for (int i = 0; i < 200; ++i) {
      auto info = cluster->ModelInfo();
      if (info.ok() && info->replica_info_size() > 0 && info->replica_info(0).running() == 1) return true;
      std::this_thread::sleep_for(milliseconds(5));
    }
    return false;
  }());
  v1::GenerateRequest late = GreedyText("Once upon a time", 8);
  late.set_request_id("expires-in-queue");
  const UnaryResult r = RunUnary(cluster->api(), late, milliseconds(100));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << r.status.error_message();
  blocker.join();
  // Logged as ended before its first token: it never ran a step.
  std::string line;
  for (int i = 0; i < 100 && line.empty(); ++i) {
    for (absl::string_view l : absl::StrSplit(CoordinatorLog(*cluster), '\n')) {
      if (absl::StrContains(l, "request_id=expires-in-queue ")) line = std::string(l);
    }
    if (line.empty()) std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_FALSE(line.empty()) << cluster->Logs();
  EXPECT_TRUE(absl::StrContains(line, "generation_tokens=0 ")) << line;
  EXPECT_FALSE(absl::StrContains(line, "ttft_seconds")) << line;
  EXPECT_TRUE(absl::StrContains(line, "finish_reason=cancelled")) << line;
}

}  // namespace
}  // namespace tessera::testing
