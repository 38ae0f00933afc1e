// Disaggregated prefill and decode end to end on stories260K: a prefill and a decode
// replica (--replica-roles prefill,decode) give exactly the greedy tokens one replica
// gives, at tp 1 and 2; the KV moves rank to rank (only the blocks the decode replica does
// not cache); and a worker killed in the middle of a transfer (held there with
// TESSERA_KV_PUSH_DELAY_MS) costs no block on either side and loses no request it need not.
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/e2e/http_get.h"
#include "tests/e2e/load_clients.h"
#include "tests/e2e/metrics_text.h"
#include "tests/e2e/serving_util.h"

namespace tessera::testing {
namespace {

constexpr int kBlockBytes = 20480;  // stories260K, F32: 5 layers x K,V x 4 heads x 16 x 16 tokens x 4 B.

double Metric(const Cluster& cluster, const std::string& name, const std::string& label = "") {
  return MetricSum(HttpGet(cluster.metrics_port(), "/metrics").body, name, label);
}

// Waits until `name` (summed) reaches `at_least`; the engine publishes once per loop.
bool WaitMetric(const Cluster& cluster, const std::string& name, const std::string& label, double at_least) {
  for (int i = 0; i < 500; ++i) {
    if (Metric(cluster, name, label) >= at_least) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::unique_ptr<Cluster> StartDisaggregated(int tp, ClusterOptions options = {}) {
  options.coordinator_flags.push_back("--replica-roles=prefill,decode");
  // Worker order = replica 0's ranks, then replica 1's, so a test knows whom it kills.
  for (int replica = 0; replica < 2; ++replica) {
    for (int rank = 0; rank < tp; ++rank) options.worker_hints.push_back({replica, rank});
  }
  return StartStories(tp, /*replicas=*/2, std::move(options));
}

class DisaggregationE2eTest : public ::testing::TestWithParam<int> {};

TEST_P(DisaggregationE2eTest, HandedOffRequestsGiveTheTokensOfOneReplica) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const int tp = GetParam();
  std::vector<v1::GenerateRequest> requests;
  int seed = 0;
  for (int n : {5, 16, 17, 40, 120, 300}) requests.push_back(GreedyIds(RandomIds(n, 500 + seed++), 24));
  requests.push_back(GreedyIds(RandomIds(30, 999), 1));  // Done at the prefill: never handed off.
  std::vector<std::vector<int32_t>> reference;
  {
    auto one = StartStories(tp, /*replicas=*/1);
    ASSERT_NE(one, nullptr);
    for (const auto& r : requests) {
      UnaryResult res = RunUnary(one->api(), r);
      ASSERT_TRUE(res.status.ok()) << res.status.error_message();
      reference.push_back(res.ids());
    }
  }

  auto cluster = StartDisaggregated(tp);
  ASSERT_NE(cluster, nullptr);
  auto info = cluster->ModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_EQ(info->replica_info_size(), 2);
  EXPECT_EQ(info->replica_info(0).role(), "prefill");
  EXPECT_EQ(info->replica_info(1).role(), "decode");

  std::vector<std::future<UnaryResult>> together;
  for (const auto& r : requests) {
    together.push_back(std::async(std::launch::async, [&cluster, r] { return RunUnary(cluster->api(), r); }));
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    UnaryResult res = together[i].get();
    ASSERT_TRUE(res.status.ok()) << "request " << i << ": " << res.status.error_message();
    EXPECT_EQ(res.ids(), reference[i]) << "request " << i << " changed when its KV moved";
    const bool handed_off = requests[i].stopping().max_new_tokens() > 1;
    EXPECT_EQ(res.response.replica(), handed_off ? 1u : 0u) << "request " << i;
  }
  // A stream gets its first token from the prefill replica and the rest from the decode one.
  StreamResult stream = RunStream(cluster->api(), requests[4]);
  ASSERT_TRUE(stream.status.ok()) << stream.status.error_message();
  EXPECT_EQ(stream.ids, reference[4]);

  const double handoffs = 7;  // Six concurrent, one stream.
  EXPECT_TRUE(WaitMetric(*cluster, "tessera_kv_transfers_total", "outcome=\"ok\"", handoffs));
  EXPECT_EQ(Metric(*cluster, "tessera_kv_transfers_total", "outcome=\"failed\""), 0);
  // The second run of the 300-token prompt: its 18 full blocks are cached on the decode
  // replica now, so only the block holding its tail moves (all ranks together: one block).
  const double bytes_before = Metric(*cluster, "tessera_kv_transfer_bytes_total");
  EXPECT_GE(bytes_before, 19.0 * kBlockBytes);
  UnaryResult again = RunUnary(cluster->api(), requests[5]);
  ASSERT_TRUE(again.status.ok()) << again.status.error_message();
  EXPECT_EQ(again.ids(), reference[5]);
  EXPECT_EQ(again.response.usage().cached_prompt_tokens(), 288u);  // On the prefill replica.
  ASSERT_TRUE(WaitMetric(*cluster, "tessera_kv_transfers_total", "outcome=\"ok\"", handoffs + 1));
  EXPECT_EQ(Metric(*cluster, "tessera_kv_transfer_bytes_total") - bytes_before, kBlockBytes);

  absl::StatusOr<v1::ModelInfo> after;
  EXPECT_TRUE(WaitDrained(*cluster, 2, std::chrono::seconds(10), &after)) << after->DebugString();
}

INSTANTIATE_TEST_SUITE_P(Tp, DisaggregationE2eTest, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& info) { return "tp" + std::to_string(info.param); });

// Kills one side while a request's KV is in flight (each push held 1.5 s).
class TransferFailureTest : public ::testing::TestWithParam<bool> {};

TEST_P(TransferFailureTest, WorkerKilledMidTransferLeaksNoBlock) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const bool kill_decode = GetParam();
  ClusterOptions options;
  options.worker_env = {"TESSERA_KV_PUSH_DELAY_MS=1500"};
  auto cluster = StartDisaggregated(/*tp=*/1, options);
  ASSERT_NE(cluster, nullptr);
  const v1::GenerateRequest request = GreedyIds(RandomIds(100, 7), 20);
  UnaryResult reference = RunUnary(cluster->api(), request);  // Before anything fails.
  ASSERT_TRUE(reference.status.ok()) << reference.status.error_message();

  auto pending = std::async(std::launch::async, [&cluster, request] {
    return RunUnary(cluster->api(), GreedyIds(RandomIds(100, 8), 20));
  });
  ASSERT_TRUE(WaitMetric(*cluster, "tessera_kv_handoffs", "state=\"transferring\"", 1))
      << "no transfer started\n" << cluster->Logs();
  cluster->Kill(cluster->worker(kill_decode ? 1 : 0).pid);
  UnaryResult res = pending.get();
  if (kill_decode) {
    // The request was the decode replica's: it fails with it, and says so.
    EXPECT_EQ(res.status.error_code(), grpc::StatusCode::UNAVAILABLE) << res.status.error_message();
    // The prefill replica decodes alone now, from the KV it computed.
    UnaryResult alone = RunUnary(cluster->api(), request);
    ASSERT_TRUE(alone.status.ok()) << alone.status.error_message();
    EXPECT_EQ(alone.ids(), reference.ids());
    EXPECT_EQ(alone.response.replica(), 0u);
  } else {
    // The decode replica recomputes the prompt the dead prefill replica could not send.
    ASSERT_TRUE(res.status.ok()) << res.status.error_message();
    EXPECT_EQ(res.response.replica(), 1u);
    EXPECT_TRUE(WaitMetric(*cluster, "tessera_kv_transfers_total", "outcome=\"failed\"", 1));
    // And serves new requests whole, as the only replica left, once the coordinator has
    // noticed the death (until then a request may still land on the dead replica and get
    // UNAVAILABLE, which clients retry).
    UnaryResult alone = RunUnary(cluster->api(), request);
    for (int i = 0; i < 50 && alone.status.error_code() == grpc::StatusCode::UNAVAILABLE; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      alone = RunUnary(cluster->api(), request);
    }
    ASSERT_TRUE(alone.status.ok()) << alone.status.error_message();
    EXPECT_EQ(alone.ids(), reference.ids());
    EXPECT_EQ(alone.response.replica(), 1u);
  }
  // Every block of the surviving replica is free again.
  auto info = cluster->ModelInfo();
  ASSERT_TRUE(info.ok());
  const int survivor = kill_decode ? 0 : 1;
  bool drained = false;
  for (int i = 0; i < 250 && !drained; ++i) {
    info = cluster->ModelInfo();
    ASSERT_TRUE(info.ok());
    for (const v1::ReplicaInfo& r : info->replica_info()) {
      if (static_cast<int>(r.replica()) == survivor) drained = r.running() == 0 && r.free_blocks() == r.total_blocks();
    }
    if (!drained) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(drained) << info->DebugString();
}

INSTANTIATE_TEST_SUITE_P(Side, TransferFailureTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "DecodeKilled" : "PrefillKilled";
                         });

}  // namespace
}  // namespace tessera::testing
