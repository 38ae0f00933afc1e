// Network faults between nodes (issue 39): the coordinator and each worker run in a network
// namespace of their own (tests/netfault/net_topology.h), tp 2 x 2 replicas with Gloo
// between the ranks, under steady client load. A worker's link goes down for a while and
// comes back. Every attempt must end with a status within its deadline (never a hang), a
// client that retries UNAVAILABLE loses no request, every replica serves again within
// 10 s of the link returning, and every KV block is back in the pool at the end. The
// figures go to $TESSERA_RESULTS_DIR/netfault_link_down_stories260k.json (the test's
// scratch folder when unset).
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

// Skips where namespaces cannot be made, except in CI (CI=true), where that is a failure.
#define TESSERA_REQUIRE_NETNS()                                                         \
  do {                                                                                \
    if (absl::Status s = NetTopology::Supported(); !s.ok()) {                         \
      const char* ci = std::getenv("CI");                                             \
      if (ci != nullptr && std::string(ci) == "true") FAIL() << s.message();          \
      GTEST_SKIP() << s.message();                                                    \
    }                                                                                 \
  } while (false)

// Node 0 is the coordinator, node 1 + w worker w.
std::unique_ptr<Cluster> StartInNamespaces(NetTopology& net) {
  ClusterOptions options;
  options.coordinator_host = net.address(0);
  options.coordinator_launcher = net.Launcher(0);
  for (int w = 0; w < kWorkers; ++w) {
    options.worker_hosts.push_back(net.address(1 + w));
    options.worker_launchers.push_back(net.Launcher(1 + w));
  }
  // Ranks in namespaces of their own share this machine, so `auto` would pick shared
  // memory between them, which no link fault touches.
  options.coordinator_flags = {"--communicator", "gloo"};
  options.fixed_worker_ports = true;
  return StartStories(kTp, kReplicas, options);
}

struct FaultOutcome {
  nlohmann::json figures;
  bool recovered = false;
};

// Takes worker `victim`'s link down for `down_for` under load, brings it back, and waits
// for every replica to serve again.
FaultOutcome LinkDownUnderLoad(NetTopology& net, Cluster& cluster, int victim, std::chrono::seconds down_for) {
  const std::string address = cluster.address();
  LoadFigures figures;
  std::atomic<bool> stop{false};
  const LoadOptions load;
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back(ClientLoop, address, std::cref(load), &stop, &figures, c + 1);
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));  // Steady load first.

  const auto down_at = LoadClock::now();
  EXPECT_TRUE(net.SetLinkUp(1 + victim, false).ok());
  bool drop_seen = false;
  while (LoadClock::now() - down_at < down_for) {
    drop_seen = drop_seen || !Serving(address, kReplicas);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  const auto up_at = LoadClock::now();
  EXPECT_TRUE(net.SetLinkUp(1 + victim, true).ok());
  FaultOutcome outcome;
  while (LoadClock::now() - up_at < std::chrono::seconds(30)) {
    if (Serving(address, kReplicas)) {
      outcome.recovered = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const double recovery_s = Seconds(LoadClock::now() - up_at);
  std::this_thread::sleep_for(std::chrono::seconds(2));  // Steady load after the fault.
  stop = true;
  for (auto& t : clients) t.join();

  absl::StatusOr<v1::ModelInfo> info;
  const bool drained = WaitDrained(cluster, kReplicas, std::chrono::seconds(10), &info);
  outcome.figures = {{"victim", absl::StrCat("worker", victim)},
                     {"link_down_s", Seconds(up_at - down_at)},
                     {"drop_seen", drop_seen},
                     {"recovered", outcome.recovered},
                     {"recovery_after_link_up_s", recovery_s},
                     {"requests", figures.requests},
                     {"completed", figures.completed},
                     {"lost", figures.lost},
                     {"attempts", figures.attempts},
                     {"attempts_by_status", figures.attempt_statuses},
                     {"late_attempts", figures.late_attempts},
                     {"worst_attempt_s", figures.worst_attempt_s},
                     {"kv_blocks_free_at_end", drained}};
  std::printf("link down %.1f s on worker%d: %s\n", Seconds(up_at - down_at), victim,
              outcome.figures.dump().c_str());
  EXPECT_TRUE(outcome.recovered) << "not serving 30 s after the link came back\n" << cluster.Logs();
  EXPECT_LT(recovery_s, Seconds(kRecoveryBound));
  EXPECT_GT(figures.completed, 0);
  EXPECT_EQ(figures.lost, 0) << outcome.figures.dump(2) << "\n" << cluster.Logs();
  EXPECT_EQ(figures.late_attempts, 0) << "an attempt outlived its deadline";
  EXPECT_TRUE(drained) << (info.ok() ? info->DebugString() : info.status().ToString());
  return outcome;
}

void WriteFigures(const std::string& name, nlohmann::json faults) {
  nlohmann::json out;
  out["schema"] = "tessera-netfault/v1";
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  out["conditions"] = {{"model", "stories260K"}, {"tp", kTp}, {"replicas", kReplicas},
                       {"communicator", "gloo"}, {"clients", kClients}, {"max_new_tokens", LoadOptions().max_new_tokens},
                       {"attempt_deadline_s", LoadOptions().attempt_deadline.count()},
                       {"network", "a network namespace per process, veth pairs on one bridge"},
                       {"date", date},
                       {"machine", {{"cpu_model", CpuModel()},
                                    {"logical_cores", static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN))}}}};
  out["faults"] = std::move(faults);
  const char* dir = std::getenv("TESSERA_RESULTS_DIR");
  const std::filesystem::path path =
      (dir != nullptr && *dir != '\0' ? std::filesystem::path(dir) : ScratchDir("netfault")) / name;
  std::ofstream(path) << out.dump(2) << "\n";
  std::printf("netfault figures in %s\n", path.c_str());
}

TEST(NetTopologyTest, NodesHaveTheirOwnAddressesAndLinks) {
  TESSERA_REQUIRE_NETNS();
  auto net = NetTopology::Create(2);
  ASSERT_TRUE(net.ok()) << net.status();
  for (int node = 0; node < 2; ++node) {
    auto addresses = RunCommand({(*net)->Launcher(node)[0], "-n", absl::StrCat("tsr", ::getpid(), "n", node),
                                 "-4", "-o", "addr", "show", "dev", "eth0"});
    ASSERT_TRUE(addresses.ok()) << addresses.status();
    EXPECT_NE(addresses->find((*net)->address(node) + "/24"), std::string::npos) << *addresses;
  }
  // Down and up again on the bridge side.
  EXPECT_TRUE((*net)->SetLinkUp(1, false).ok());
  EXPECT_TRUE((*net)->SetLinkUp(1, true).ok());
}

TEST(LinkFaultTest, WorkerLinkDownBrieflyAndLongerLosesNothing) {
  TESSERA_REQUIRE_STORIES_MODEL();
  TESSERA_REQUIRE_NETNS();
  auto net = NetTopology::Create(1 + kWorkers);
  ASSERT_TRUE(net.ok()) << net.status();
  auto cluster = StartInNamespaces(**net);
  ASSERT_NE(cluster, nullptr);
  nlohmann::json faults = nlohmann::json::array();
  faults.push_back(LinkDownUnderLoad(**net, *cluster, /*victim=*/2, std::chrono::seconds(3)).figures);
  faults.push_back(LinkDownUnderLoad(**net, *cluster, /*victim=*/1, std::chrono::seconds(30)).figures);
  WriteFigures("netfault_link_down_stories260k.json", std::move(faults));
}

}  // namespace
}  // namespace tessera::testing
