// Chaos: steady load from clients while a worker or the coordinator is killed with
// SIGKILL every few seconds and restarted with the same flags and ports (as Kubernetes
// restarts a pod). Every attempt must end with a status within its deadline, a client
// that retries UNAVAILABLE loses no request, both replicas serve again within 10 s of
// each restart (the figures also give the time from the kill), and every KV block is back
// in the pool at the end. Run twice: two `both` replicas, and a prefill and a decode
// replica (--replica-roles), where kills also land in the middle of KV transfers. The
// figures go to $TESSERA_RESULTS_DIR/chaos_stories260k.json and
// chaos_disaggregated_stories260k.json (the test's scratch folder when unset).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/http_get.h"
#include "tests/e2e/load_clients.h"
#include "tests/e2e/metrics_text.h"
#include "tests/e2e/serving_util.h"

namespace tessera::testing {
namespace {

using Clock = LoadClock;

constexpr int kTp = 2;
constexpr int kReplicas = 2;
constexpr int kClients = 4;
constexpr int kKills = 24;
constexpr auto kChaosBudget = std::chrono::seconds(100);  // Keeps the test near 2 minutes.
constexpr auto kRecoveryBound = std::chrono::seconds(10);

struct ChaosParams {
  const char* name;
  const char* replica_roles;  // --replica-roles; empty: both replicas do everything.
  const char* results_file;
};

class ChaosTest : public ::testing::TestWithParam<ChaosParams> {};

TEST_P(ChaosTest, KillsAndRestartsUnderLoadLoseNothing) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const ChaosParams& params = GetParam();
  const bool disaggregated = *params.replica_roles != '\0';
  ClusterOptions options;
  options.fixed_worker_ports = true;
  if (disaggregated) options.coordinator_flags = {absl::StrCat("--replica-roles=", params.replica_roles)};
  auto cluster = StartStories(kTp, kReplicas, options);
  ASSERT_NE(cluster, nullptr);
  const std::string address = cluster->address();

  LoadFigures figures;
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  const LoadOptions load;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back(ClientLoop, address, std::cref(load), &stop, &figures, c + 1);
  }

  std::mt19937 rng(12);
  nlohmann::json kills = nlohmann::json::array();
  double worst_recovery_s = 0;
  const auto chaos_start = Clock::now();
  for (int k = 0; k < kKills && Clock::now() - chaos_start < kChaosBudget; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2000 + rng() % 2000));
    // Process 0 is the coordinator, 1..4 the workers.
    const int victim = static_cast<int>(rng() % (1 + kTp * kReplicas));
    const pid_t pid = victim == 0 ? cluster->coordinator().pid : cluster->worker(victim - 1).pid;
    const std::string name = victim == 0 ? "coordinator" : absl::StrCat("worker", victim - 1);
    const auto killed_at = Clock::now();
    cluster->Kill(pid);
    // Down for a moment, as a pod between its death and its restart; the coordinator
    // should notice meanwhile (under load a step fails at once).
    bool drop_seen = victim == 0;
    while (Clock::now() - killed_at < std::chrono::milliseconds(300)) {
      drop_seen = drop_seen || !Serving(address, kReplicas);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const auto restarted_at = Clock::now();
    auto fresh = cluster->Restart(pid);
    ASSERT_TRUE(fresh.ok()) << fresh.status();
    const bool back = WaitServing(address, kReplicas, std::chrono::seconds(30));
    const double recovery_s = Seconds(Clock::now() - restarted_at);
    worst_recovery_s = std::max(worst_recovery_s, recovery_s);
    kills.push_back({{"victim", name}, {"recovery_s", recovery_s}, {"recovered", back},
                     {"kill_to_capacity_s", Seconds(Clock::now() - killed_at)}, {"drop_seen", drop_seen}});
    std::printf("chaos: killed %s, capacity back after %.2f s\n", name.c_str(), recovery_s);
    EXPECT_TRUE(back) << name << " restart: not serving after 30 s\n" << cluster->Logs();
    EXPECT_LT(recovery_s, Seconds(kRecoveryBound)) << name;
    if (!back) break;
  }
  const double chaos_s = Seconds(Clock::now() - chaos_start);
  std::this_thread::sleep_for(std::chrono::seconds(2));  // Steady load after the last restart.
  stop = true;
  for (auto& t : clients) t.join();

  // Disaggregated, requests after the chaos still move their KV (the counters start again
  // with each coordinator).
  double transfers_ok = 0;
  if (disaggregated) {
    for (int i = 0; i < 4; ++i) {
      UnaryResult r = RunUnary(cluster->api(), GreedyText("Once upon a time", 12));
      EXPECT_TRUE(r.status.ok()) << r.status.error_message();
    }
    const std::string metrics = HttpGet(cluster->metrics_port(), "/metrics").body;
    transfers_ok = MetricSum(metrics, "tessera_kv_transfers_total", "outcome=\"ok\"");
    EXPECT_GE(transfers_ok, 4) << metrics;
  }

  // No leak: with nothing running, every replica's blocks are free again.
  absl::StatusOr<v1::ModelInfo> info;
  const bool drained = WaitDrained(*cluster, kReplicas, std::chrono::seconds(10), &info);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(drained) << info->DebugString();

  nlohmann::json out;
  out["schema"] = "tessera-chaos/v1";
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  out["conditions"] = {{"model", "stories260K"}, {"tp", kTp}, {"replicas", kReplicas},
                       {"replica_roles", disaggregated ? params.replica_roles : "both,both"},
                       {"clients", kClients}, {"max_new_tokens", load.max_new_tokens},
                       {"attempt_deadline_s", Seconds(load.attempt_deadline)}, {"kill_signal", "SIGKILL"},
                       {"restart", "same flags, same ports"}, {"date", date},
                       {"machine", {{"cpu_model", CpuModel()},
                                    {"logical_cores", static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN))}}}};
  out["chaos_seconds"] = chaos_s;
  out["kills"] = kills;
  out["worst_recovery_s"] = worst_recovery_s;
  out["requests"] = figures.requests;
  out["completed"] = figures.completed;
  out["lost"] = figures.lost;
  out["attempts"] = figures.attempts;
  out["attempts_by_status"] = figures.attempt_statuses;
  out["late_attempts"] = figures.late_attempts;
  out["worst_attempt_s"] = figures.worst_attempt_s;
  out["kv_blocks_free_at_end"] = drained;
  if (disaggregated) out["kv_transfers_ok_after_chaos"] = transfers_ok;
  const char* dir = std::getenv("TESSERA_RESULTS_DIR");
  const std::filesystem::path path =
      (dir != nullptr && *dir != '\0' ? std::filesystem::path(dir) : ScratchDir("chaos")) / params.results_file;
  std::ofstream(path) << out.dump(2) << "\n";
  std::printf("chaos figures in %s:\n%s\n", path.c_str(), out.dump(2).c_str());

  EXPECT_GE(static_cast<int>(kills.size()), 5) << "too few kills in the time budget";
  EXPECT_GT(figures.completed, 0);
  EXPECT_EQ(figures.lost, 0) << out.dump(2) << "\n" << cluster->Logs();
  EXPECT_EQ(figures.late_attempts, 0) << "an attempt outlived its deadline";
}

INSTANTIATE_TEST_SUITE_P(Roles, ChaosTest,
                         ::testing::Values(ChaosParams{"both", "", "chaos_stories260k.json"},
                                           ChaosParams{"prefill_decode", "prefill,decode",
                                                       "chaos_disaggregated_stories260k.json"}),
                         [](const ::testing::TestParamInfo<ChaosParams>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tessera::testing
