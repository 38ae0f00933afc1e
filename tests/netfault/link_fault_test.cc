// Network faults between nodes (issue 39): the coordinator and each worker run in a network
// namespace of their own (tests/netfault/net_topology.h), tp 2 x 2 replicas with Gloo
// between the ranks, under steady client load. A fault (a link down, a slow link, packet
// loss, a worker cut off from its peers, the coordinator cut off from every worker) is
// held for a while and then mended. Every attempt must end with
// a status within its deadline (never a hang), a client that retries UNAVAILABLE loses no
// request, every replica serves again within 10 s of the fault's end, and every KV block is
// back in the pool at the end. The figures go to
// $TESSERA_RESULTS_DIR/netfault_*_stories260k.json (the test's scratch folder when unset),
// with the step time and inter-token latency a tensor-parallel group pays per millisecond
// of link delay between its ranks.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/load_clients.h"
#include "tests/e2e/serving_util.h"
#include "tests/netfault/net_topology.h"

namespace tessera::testing {
namespace {

constexpr int kTp = 2;
constexpr int kReplicas = 2;
constexpr int kWorkers = kTp * kReplicas;
constexpr int kClients = 4;
constexpr auto kRecoveryBound = std::chrono::seconds(10);

// Skips when `status` (what this machine lacks) is not OK, except in CI (CI=true), where
// that is a failure.
#define TESSERA_REQUIRE_NETWORK(status)                                        \
  do {                                                                       \
    if (absl::Status s = (status); !s.ok()) {                                \
      const char* ci = std::getenv("CI");                                    \
      if (ci != nullptr && std::string(ci) == "true") FAIL() << s.message(); \
      GTEST_SKIP() << s.message();                                           \
    }                                                                        \
  } while (false)

// The coordinator (node 0) and the workers (node 1 + w is worker w), each in a network
// namespace of its own. The cluster is declared last, so it stops before the network goes.
struct NetCluster {
  std::unique_ptr<NetTopology> net;
  std::unique_ptr<Cluster> cluster;
};

// A failure is recorded and `cluster` left null when either cannot start.
NetCluster StartInNamespaces() {
  NetCluster c;
  auto net = NetTopology::Create(1 + kWorkers);
  if (!net.ok()) {
    ADD_FAILURE() << net.status();
    return c;
  }
  c.net = std::move(*net);
  ClusterOptions options;
  options.coordinator_host = c.net->address(0);
  options.coordinator_launcher = c.net->Launcher(0);
  for (int w = 0; w < kWorkers; ++w) {
    options.worker_hosts.push_back(c.net->address(1 + w));
    options.worker_launchers.push_back(c.net->Launcher(1 + w));
  }
  // Ranks in namespaces of their own share this machine, so `auto` would pick shared
  // memory between them, which no link fault touches.
  options.coordinator_flags = {"--communicator", "gloo"};
  options.fixed_worker_ports = true;
  c.cluster = StartStories(kTp, kReplicas, options);
  return c;
}

// A fault held for a while: `start` breaks something, `end` mends it.
struct Fault {
  std::string name;
  std::function<absl::Status()> start;
  std::function<absl::Status()> end;
  std::chrono::seconds duration;
};

// Holds `fault` under load, mends it, and waits for every replica to serve again; checks
// that nothing hung, nothing was lost and no block leaked, and returns the figures.
nlohmann::json FaultUnderLoad(Cluster& cluster, const Fault& fault, const LoadOptions& load = {}) {
  const std::string address = cluster.address();
  LoadFigures figures;
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back(ClientLoop, address, std::cref(load), &stop, &figures, c + 1);
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));  // Steady load first.

  const auto start_at = LoadClock::now();
  EXPECT_TRUE(fault.start().ok()) << fault.name;
  bool drop_seen = false;
  while (LoadClock::now() - start_at < fault.duration) {
    drop_seen = drop_seen || !Serving(address, kReplicas);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  const auto end_at = LoadClock::now();
  EXPECT_TRUE(fault.end().ok()) << fault.name;
  const bool recovered = WaitServing(address, kReplicas, std::chrono::seconds(30));
  const double recovery_s = Seconds(LoadClock::now() - end_at);
  std::this_thread::sleep_for(std::chrono::seconds(2));  // Steady load after the fault.
  stop = true;
  for (auto& t : clients) t.join();

  absl::StatusOr<v1::ModelInfo> info;
  const bool drained = WaitDrained(cluster, kReplicas, std::chrono::seconds(10), &info);
  nlohmann::json out = {{"fault", fault.name},
                        {"fault_s", Seconds(end_at - start_at)},
                        {"replica_down_seen", drop_seen},
                        {"recovered", recovered},
                        {"serving_again_after_s", recovery_s},
                        {"requests", figures.requests},
                        {"completed", figures.completed},
                        {"lost", figures.lost},
                        {"attempts", figures.attempts},
                        {"attempts_by_status", figures.attempt_statuses},
                        {"late_attempts", figures.late_attempts},
                        {"worst_attempt_s", figures.worst_attempt_s},
                        {"kv_blocks_free_at_end", drained},
                        {"attempt_deadline_s", load.attempt_deadline.count()}};
  std::printf("%s: %s\n", fault.name.c_str(), out.dump().c_str());
  EXPECT_TRUE(recovered) << fault.name << ": not serving 30 s after it ended\n" << cluster.Logs();
  EXPECT_LT(recovery_s, Seconds(kRecoveryBound)) << fault.name;
  EXPECT_GT(figures.completed, 0) << fault.name;
  EXPECT_EQ(figures.lost, 0) << out.dump(2) << "\n" << cluster.Logs();
  EXPECT_EQ(figures.late_attempts, 0) << fault.name << ": an attempt outlived its deadline";
  EXPECT_TRUE(drained) << (info.ok() ? info->DebugString() : info.status().ToString());
  return out;
}

Fault LinkDown(NetTopology& net, int worker, std::chrono::seconds duration) {
  return {absl::StrCat("worker", worker, " link down ", duration.count(), " s"),
          [&net, worker] { return net.SetLinkUp(1 + worker, false); },
          [&net, worker] { return net.SetLinkUp(1 + worker, true); }, duration};
}

// Writes `figures` under `key` with the conditions they were measured in; `load` says which
// load ran (replaces the default: the fault tests' clients).
void WriteFigures(const std::string& name, const std::string& key, nlohmann::json figures,
                  nlohmann::json load = nullptr) {
  nlohmann::json out;
  out["schema"] = "tessera-netfault/v1";
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  out["conditions"] = {{"model", "stories260K"}, {"tp", kTp}, {"replicas", kReplicas},
                       {"communicator", "gloo"},
                       {"load", load.is_null() ? nlohmann::json{{"clients", kClients},
                                                                {"max_new_tokens", LoadOptions().max_new_tokens},
                                                                {"attempt_deadline_s",
                                                                 LoadOptions().attempt_deadline.count()}}
                                               : load},
                       {"network", "a network namespace per process, veth pairs on one bridge"},
                       {"date", date},
                       {"machine", {{"cpu_model", CpuModel()},
                                    {"logical_cores", static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN))}}}};
  out[key] = std::move(figures);
  const char* dir = std::getenv("TESSERA_RESULTS_DIR");
  const std::filesystem::path path =
      (dir != nullptr && *dir != '\0' ? std::filesystem::path(dir) : ScratchDir("netfault")) / name;
  std::ofstream(path) << out.dump(2) << "\n";
  std::printf("netfault figures in %s\n", path.c_str());
}

TEST(NetTopologyTest, NodesHaveTheirOwnAddressesAndLinks) {
  TESSERA_REQUIRE_NETWORK(NetTopology::Supported());
  auto net = NetTopology::Create(2);
  ASSERT_TRUE(net.ok()) << net.status();
  for (int node = 0; node < 2; ++node) {
    std::vector<std::string> show = (*net)->Launcher(node);
    show.insert(show.end(), {IpBinary(), "-4", "-o", "addr", "show", "dev", "eth0"});
    auto addresses = RunCommand(show);
    ASSERT_TRUE(addresses.ok()) << addresses.status();
    EXPECT_NE(addresses->find((*net)->address(node) + "/24"), std::string::npos) << *addresses;
  }
  // Down and up again on the bridge side.
  EXPECT_TRUE((*net)->SetLinkUp(1, false).ok());
  EXPECT_TRUE((*net)->SetLinkUp(1, true).ok());
}

TEST(LinkFaultTest, WorkerLinkDownBrieflyAndLongerLosesNothing) {
  TESSERA_REQUIRE_STORIES_MODEL();
  TESSERA_REQUIRE_NETWORK(NetTopology::Supported());
  NetCluster c = StartInNamespaces();
  ASSERT_NE(c.cluster, nullptr);
  Cluster* cluster = c.cluster.get();
  nlohmann::json faults = nlohmann::json::array();
  faults.push_back(FaultUnderLoad(*cluster, LinkDown(*c.net, 2, std::chrono::seconds(3))));
  faults.push_back(FaultUnderLoad(*cluster, LinkDown(*c.net, 1, std::chrono::seconds(30))));
  WriteFigures("netfault_link_down_stories260k.json", "faults", std::move(faults));
}

TEST(LinkFaultTest, LossAndAPartitionFromPeersLoseNothing) {
  TESSERA_REQUIRE_STORIES_MODEL();
  TESSERA_REQUIRE_NETWORK(NetTopology::Supported());
  TESSERA_REQUIRE_NETWORK(NetTopology::FiltersSupported());
  NetCluster c = StartInNamespaces();
  ASSERT_NE(c.cluster, nullptr);
  Cluster* cluster = c.cluster.get();
  NetTopology& n = *c.net;
  nlohmann::json faults = nlohmann::json::array();
  faults.push_back(FaultUnderLoad(
      *cluster, {"worker1 link losing 5 % of packets each way for 20 s", [&n] { return n.SetLoss(2, 5); },
                 [&n] { return n.ClearFilter(2); }, std::chrono::seconds(20)}));
  // Worker 1 keeps its coordinator but loses every other worker, its rank peer included.
  faults.push_back(FaultUnderLoad(
      *cluster, {"worker1 cut off from the other workers (not the coordinator) for 20 s",
                 [&n] { return n.Partition(2, {1, 3, 4}); }, [&n] { return n.ClearFilter(2); },
                 std::chrono::seconds(20)}));
  WriteFigures("netfault_loss_partition_stories260k.json", "faults", std::move(faults));
}

TEST(LinkFaultTest, ASlowLinkAndACoordinatorCutOffLoseNothing) {
  TESSERA_REQUIRE_STORIES_MODEL();
  TESSERA_REQUIRE_NETWORK(NetTopology::Supported());
  TESSERA_REQUIRE_NETWORK(NetTopology::FiltersSupported());
  TESSERA_REQUIRE_NETWORK(NetTopology::DelaySupported());
  NetCluster c = StartInNamespaces();
  ASSERT_NE(c.cluster, nullptr);
  Cluster* cluster = c.cluster.get();
  NetTopology& n = *c.net;
  nlohmann::json faults = nlohmann::json::array();
  // Everything worker 1 sends waits 30-70 ms: each of a step's all-reduces does, so its
  // replica's steps take tenths of a second. Slow is not dead: it keeps serving.
  LoadOptions slow;
  slow.attempt_deadline = std::chrono::seconds(30);
  faults.push_back(FaultUnderLoad(
      *cluster, {"worker1 link delayed 50 ms +/- 20 ms for 20 s", [&n] { return n.SetDelay(2, 50, 20); },
                 [&n] { return n.ClearDelay(2); }, std::chrono::seconds(20)},
      slow));
  // The clients still reach the coordinator; it reaches no worker and no worker reaches it.
  faults.push_back(FaultUnderLoad(
      *cluster, {"coordinator cut off from every worker (not from its clients) for 10 s",
                 [&n] { return n.Partition(0, {1, 2, 3, 4}); }, [&n] { return n.ClearFilter(0); },
                 std::chrono::seconds(10)}));
  WriteFigures("netfault_delay_coordinator_cut_stories260k.json", "faults", std::move(faults));
}

// One greedy stream: when each token arrived.
struct TimedStream {
  grpc::Status status;
  std::vector<int32_t> ids;
  std::vector<double> arrivals_s;  // From the request's start, one per token.
};

TimedStream StreamTimed(v1::Generation::Stub& stub, const v1::GenerateRequest& request) {
  TimedStream r;
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(std::chrono::seconds(120)));
  const auto start = LoadClock::now();
  auto reader = stub.GenerateStream(&ctx, request);
  v1::GenerateStreamResponse message;
  while (reader->Read(&message)) {
    const double at = Seconds(LoadClock::now() - start);
    for (int32_t id : message.token_ids()) {
      r.ids.push_back(id);
      r.arrivals_s.push_back(at);
    }
  }
  r.status = reader->Finish();
  return r;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<size_t>(p * (values.size() - 1) + 0.5))];
}

// What a tensor-parallel group pays for distance between its ranks: every worker's packets
// to the other workers wait 0, 1 or 10 ms (one way), and one client at a time streams
// greedy requests (batch 1, so the gap between tokens is the step time). The tokens must
// not change with the delay.
TEST(LinkLatencyTest, StepTimeWithDelayBetweenRanks) {
  TESSERA_REQUIRE_STORIES_MODEL();
  TESSERA_REQUIRE_NETWORK(NetTopology::Supported());
  TESSERA_REQUIRE_NETWORK(NetTopology::DelaySupported());
  NetCluster c = StartInNamespaces();
  ASSERT_NE(c.cluster, nullptr);
  Cluster* cluster = c.cluster.get();
  NetTopology& n = *c.net;
  auto stub = v1::Generation::NewStub(ClientChannel(cluster->address()));
  constexpr int kStreams = 6;
  constexpr int kTokens = 24;
  nlohmann::json levels = nlohmann::json::array();
  std::vector<std::vector<int32_t>> reference;
  for (double delay_ms : {0.0, 1.0, 10.0}) {
    for (int w = 0; w < kWorkers; ++w) {
      std::vector<int> peers;
      for (int other = 0; other < kWorkers; ++other) {
        if (other != w) peers.push_back(1 + other);
      }
      if (delay_ms > 0) {
        ASSERT_TRUE(n.SetDelay(1 + w, delay_ms, 0, peers).ok());
      } else {
        ASSERT_TRUE(n.ClearDelay(1 + w).ok());
      }
    }
    std::vector<double> gaps_s;
    std::vector<double> first_token_s;
    for (int i = 0; i < kStreams; ++i) {
      TimedStream r = StreamTimed(*stub, GreedyIds({1, 20 + 17 * i, 51}, kTokens));
      ASSERT_TRUE(r.status.ok()) << delay_ms << " ms: " << r.status.error_message();
      ASSERT_EQ(r.ids.size(), static_cast<size_t>(kTokens));
      if (static_cast<int>(reference.size()) <= i) reference.push_back(r.ids);
      EXPECT_EQ(r.ids, reference[i]) << "greedy tokens changed with " << delay_ms << " ms between ranks";
      first_token_s.push_back(r.arrivals_s.front());
      for (size_t t = 1; t < r.arrivals_s.size(); ++t) gaps_s.push_back(r.arrivals_s[t] - r.arrivals_s[t - 1]);
    }
    nlohmann::json level = {{"delay_between_ranks_ms", delay_ms},
                            {"streams", kStreams},
                            {"tokens_per_stream", kTokens},
                            {"inter_token_s", {{"p50", Percentile(gaps_s, 0.5)},
                                               {"p95", Percentile(gaps_s, 0.95)},
                                               {"p99", Percentile(gaps_s, 0.99)}}},
                            {"time_to_first_token_s", {{"p50", Percentile(first_token_s, 0.5)},
                                                       {"p99", Percentile(first_token_s, 0.99)}}}};
    std::printf("%s\n", level.dump().c_str());
    levels.push_back(level);
  }
  for (int w = 0; w < kWorkers; ++w) EXPECT_TRUE(n.ClearDelay(1 + w).ok());
  WriteFigures("netfault_rank_latency_stories260k.json", "delays", std::move(levels),
               {{"clients", 1}, {"streams_per_delay", kStreams}, {"max_new_tokens", kTokens},
                {"delayed", "every packet from one worker to another, one way, in order"}});
}

}  // namespace
}  // namespace tessera::testing
