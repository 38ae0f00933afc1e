// Self-healing membership end to end: a killed and restarted worker re-forms its group
// (the surviving rank drops the dead group, is not ready meanwhile, and rejoins), a
// restarted coordinator gets every live worker back, and replica/rank hints decide
// which workers form which group. Plus the placement rule itself (PickGroup).
#include <signal.h>

#include <chrono>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/cluster/membership.h"
#include "gtest/gtest.h"
#include "tests/e2e/http_get.h"
#include "tests/e2e/serving_util.h"
#include "tests/support/subprocess.h"

namespace tessera::testing {
namespace {

using Clock = std::chrono::steady_clock;
using grpc::health::v1::HealthCheckResponse;

template <typename F>
bool WaitFor(F&& done, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  do {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } while (Clock::now() < deadline);
  return false;
}

// -1 when GetModelInfo fails.
int PendingWorkers(Cluster& c) {
  auto info = c.ModelInfo();
  return info.ok() ? static_cast<int>(info->pending_workers()) : -1;
}

int ReadyReplicas(Cluster& c) {
  auto info = c.ModelInfo();
  return info.ok() ? static_cast<int>(info->ready_replicas()) : -1;
}

std::string ListenAddress(const Cluster::Process& p) {
  for (size_t i = 0; i + 1 < p.args.size(); ++i) {
    if (p.args[i] == "--listen") return p.args[i + 1];
  }
  return "";
}

// The worker's readiness as the chart's readinessProbe asks it.
HealthCheckResponse::ServingStatus WorkerReadiness(const std::string& address) {
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  grpc::health::v1::HealthCheckRequest req;
  req.set_service("tessera.v1.Worker");
  grpc::health::v1::HealthCheckResponse resp;
  if (!stub->Check(&ctx, req, &resp).ok()) return HealthCheckResponse::UNKNOWN;
  return resp.status();
}

std::string ReadFile(const std::filesystem::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

WorkerSession Waiting(int replica_hint, int rank_hint, uint64_t order) {
  WorkerSession w;
  w.registration.set_replica_hint(replica_hint);
  w.registration.set_rank_hint(rank_hint);
  w.order = order;
  return w;
}

TEST(PickGroupTest, HintedWorkersTakeTheirRanksAndUnhintedFillTheRest) {
  std::map<std::string, WorkerSession> workers = {
      {"a", Waiting(1, 1, 1)}, {"b", Waiting(0, 1, 2)}, {"c", Waiting(-1, -1, 3)}, {"d", Waiting(1, 0, 4)}};
  auto one = PickGroup(workers, 1, 2);
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(*one, (std::vector<std::string>{"d", "a"}));
  // Replica 0 has only b (rank 1); c, unhinted, takes rank 0.
  auto zero = PickGroup(workers, 0, 2);
  ASSERT_TRUE(zero.has_value());
  EXPECT_EQ(*zero, (std::vector<std::string>{"c", "b"}));
}

TEST(PickGroupTest, WaitsForTheMissingRankAndIgnoresOtherReplicas) {
  std::map<std::string, WorkerSession> workers = {{"a", Waiting(0, 0, 1)}, {"b", Waiting(1, 1, 2)},
                                                  {"c", Waiting(0, 0, 3)}};
  // Rank 1 of replica 0 is missing: a second rank-0 worker does not take it.
  EXPECT_FALSE(PickGroup(workers, 0, 2).has_value());
  workers["d"] = Waiting(0, 1, 4);
  auto group = PickGroup(workers, 0, 2);
  ASSERT_TRUE(group.has_value());
  EXPECT_EQ(*group, (std::vector<std::string>{"c", "d"})) << "the freshest registration wins a contested rank";
  workers["c"].replica = 0;  // Already in a group: not a candidate.
  workers["d"].replica = 0;
  group = PickGroup(workers, 0, 2);
  EXPECT_FALSE(group.has_value());
}

TEST(MembershipTest, RestartedWorkerReformsItsGroupAndTheSurvivorRejoins) {
  TESSERA_REQUIRE_STORIES_MODEL();
  ClusterOptions options;
  options.fixed_worker_ports = true;
  auto cluster = StartStories(/*tp=*/2, /*replicas=*/1, options);
  ASSERT_NE(cluster, nullptr);
  const std::string survivor = ListenAddress(cluster->worker(0));
  ASSERT_FALSE(survivor.empty());
  EXPECT_EQ(WorkerReadiness(survivor), HealthCheckResponse::SERVING) << cluster->Logs();

  const pid_t victim = cluster->worker(1).pid;
  cluster->Kill(victim);
  EXPECT_TRUE(WaitFor([&] { return ReadyReplicas(*cluster) == 0; }, std::chrono::seconds(15))) << cluster->Logs();
  // The surviving rank drops the dead group: not ready, registered again and waiting.
  EXPECT_TRUE(WaitFor([&] { return WorkerReadiness(survivor) == HealthCheckResponse::NOT_SERVING; },
                      std::chrono::seconds(15)))
      << cluster->Logs();
  // GetModelInfo shows the group state: the survivor waits for a partner.
  EXPECT_TRUE(WaitFor([&] { return PendingWorkers(*cluster) == 1; }, std::chrono::seconds(15)))
      << cluster->Logs();

  const auto restarted_at = Clock::now();
  auto fresh = cluster->Restart(victim);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  ASSERT_TRUE(WaitFor([&] { return ReadyReplicas(*cluster) == 1; }, std::chrono::seconds(30))) << cluster->Logs();
  const double recovery_s = std::chrono::duration<double>(Clock::now() - restarted_at).count();
  std::printf("replica re-formed %.2f s after the worker restarted\n", recovery_s);
  EXPECT_LT(recovery_s, 10.0);
  EXPECT_TRUE(WaitFor([&] { return WorkerReadiness(survivor) == HealthCheckResponse::SERVING; },
                      std::chrono::seconds(5)));
  EXPECT_EQ(PendingWorkers(*cluster), 0);
  UnaryResult r = RunUnary(cluster->api(), GreedyIds({1, 50, 51}, 4));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message() << "\n" << cluster->Logs();
  EXPECT_EQ(r.ids().size(), 4u);
}

TEST(MembershipTest, RestartedCoordinatorRecoversEveryLiveWorker) {
  TESSERA_REQUIRE_STORIES_MODEL();
  ClusterOptions options;
  options.fixed_worker_ports = true;
  auto cluster = StartStories(/*tp=*/2, /*replicas=*/1, options);
  ASSERT_NE(cluster, nullptr);
  UnaryResult before = RunUnary(cluster->api(), GreedyIds({1, 50, 51}, 4));
  ASSERT_TRUE(before.status.ok()) << before.status.error_message();

  const pid_t coordinator = cluster->coordinator().pid;
  cluster->Kill(coordinator);
  const auto restarted_at = Clock::now();
  auto fresh = cluster->Restart(coordinator);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  ASSERT_TRUE(WaitFor([&] { return ReadyReplicas(*cluster) == 1; }, std::chrono::seconds(30))) << cluster->Logs();
  const double recovery_s = std::chrono::duration<double>(Clock::now() - restarted_at).count();
  std::printf("coordinator serving again %.2f s after its restart\n", recovery_s);
  EXPECT_LT(recovery_s, 10.0);
  EXPECT_TRUE(cluster->WaitForHealth(HealthCheckResponse::SERVING, std::chrono::seconds(5)));
  UnaryResult after = RunUnary(cluster->api(), GreedyIds({1, 50, 51}, 4));
  ASSERT_TRUE(after.status.ok()) << after.status.error_message() << "\n" << cluster->Logs();
  EXPECT_EQ(after.ids(), before.ids()) << "the re-formed group computes the same greedy tokens";
}

TEST(MembershipTest, ReplicaAndRankHintsDecidePlacement) {
  TESSERA_REQUIRE_STORIES_MODEL();
  ClusterOptions options;
  // Start order deliberately differs from the placement the hints ask for.
  options.worker_hints = {{1, 1}, {0, 1}, {1, 0}, {0, 0}};
  auto cluster = StartStories(/*tp=*/2, /*replicas=*/2, options);
  ASSERT_NE(cluster, nullptr);
  for (size_t w = 0; w < options.worker_hints.size(); ++w) {
    const auto [replica, rank] = options.worker_hints[w];
    EXPECT_NE(ReadFile(cluster->worker(w).log).find(absl::StrCat("joined replica ", replica, " as rank ", rank, " of 2")),
              std::string::npos)
        << "worker " << w << "\n" << cluster->Logs();
  }
  // A hint outside the cluster is refused with a message naming it; the worker exits.
  const CommandResult out = RunCommand(absl::StrCat(
      (BinaryDir() / "tessera-worker").string(), " --coordinator 127.0.0.1:", cluster->cluster_port(),
      " --insecure --replica-hint 7 --rank-hint 0 2>&1"));
  EXPECT_EQ(out.exit_code, 1);
  EXPECT_NE(out.output.find("replica_hint = 7"), std::string::npos) << out.output;
}

}  // namespace
}  // namespace tessera::testing
