// The coordinator's graceful drain on SIGTERM, which the Helm chart's preStop hook and
// terminationGracePeriodSeconds rely on: readiness goes off at once, new requests are
// refused with UNAVAILABLE, admitted requests run to the end, then the process exits 0.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "tests/support/cluster.h"
#include "tests/support/test_model.h"

namespace tessera::testing {
namespace {

using grpc::health::v1::HealthCheckResponse;

constexpr int kLongTokens = 300;

v1::GenerateRequest LongRequest() {
  v1::GenerateRequest req;
  req.set_text("Once upon a time");
  req.mutable_sampling()->set_temperature(0.0f);
  req.mutable_stopping()->set_max_new_tokens(kLongTokens);
  req.mutable_stopping()->set_ignore_eos(true);
  return req;
}

// Polls GetModelInfo until some replica reports a running or waiting request.
bool WaitUntilAdmitted(Cluster& cluster, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    auto info = cluster.ModelInfo();
    if (info.ok()) {
      for (const auto& r : info->replica_info()) {
        if (r.running() + r.waiting() > 0) return true;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

TEST(GracefulDrainTest, SigtermFinishesRunningRequestRefusesNewOnesThenExits) {
  TESSERA_REQUIRE_STORIES_MODEL();
  ClusterOptions options;
  options.model_dir = StoriesModelDir();
  options.log_dir = ScratchDir("logs");
  // No idle heartbeat during the test: the worker is paused on purpose below, and a
  // probe of a paused worker would fail the replica.
  options.coordinator_flags = {"--drain-timeout-seconds=120", "--heartbeat-ms=600000", "--metrics-port=0"};
  auto started = Cluster::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  Cluster& cluster = **started;
  const pid_t coordinator = cluster.coordinator().pid;
  const pid_t worker = cluster.worker_pids().at(0);

  // Pausing the only worker holds the long generation mid-flight for as long as the test
  // needs, so "still running during the drain" does not depend on how fast steps are.
  ::kill(worker, SIGSTOP);
  grpc::ClientContext long_ctx;
  long_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(150));
  auto reader = cluster.api().GenerateStream(&long_ctx, LongRequest());
  ASSERT_TRUE(WaitUntilAdmitted(cluster, std::chrono::seconds(30))) << cluster.Logs();

  cluster.Signal(coordinator, SIGTERM);
  EXPECT_TRUE(cluster.WaitForHealth(HealthCheckResponse::NOT_SERVING, std::chrono::seconds(30)))
      << cluster.Logs();

  grpc::ClientContext new_ctx;
  new_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::GenerateRequest short_req = LongRequest();
  short_req.mutable_stopping()->set_max_new_tokens(4);
  v1::GenerateResponse refused;
  const grpc::Status status = cluster.api().Generate(&new_ctx, short_req, &refused);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_NE(status.error_message().find("draining"), std::string::npos) << status.error_message();
  EXPECT_TRUE(cluster.Running(coordinator)) << "the coordinator exited with a request still running\n"
                                            << cluster.Logs();

  ::kill(worker, SIGCONT);
  int tokens = 0;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  v1::GenerateStreamResponse msg;
  while (reader->Read(&msg)) {
    tokens += msg.token_ids_size();
    if (msg.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) finish = msg.finish_reason();
  }
  const grpc::Status long_status = reader->Finish();
  EXPECT_TRUE(long_status.ok()) << long_status.error_message() << "\n" << cluster.Logs();
  EXPECT_EQ(tokens, kLongTokens);
  EXPECT_EQ(finish, v1::FINISH_REASON_LENGTH);

  // With nothing left to serve, the coordinator exits on its own, cleanly.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (cluster.Running(coordinator) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(cluster.Running(coordinator)) << "the coordinator did not exit after draining\n" << cluster.Logs();
  const int wait_status = cluster.coordinator().wait_status;
  EXPECT_TRUE(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0)
      << "wait status " << wait_status << "\n" << cluster.Logs();
}

TEST(GracefulDrainTest, IdleCoordinatorExitsPromptlyOnSigterm) {
  TESSERA_REQUIRE_STORIES_MODEL();
  ClusterOptions options;
  options.model_dir = StoriesModelDir();
  options.log_dir = ScratchDir("logs");
  options.coordinator_flags = {"--drain-timeout-seconds=600", "--metrics-port=0"};
  auto started = Cluster::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  Cluster& cluster = **started;
  const pid_t coordinator = cluster.coordinator().pid;
  cluster.Signal(coordinator, SIGTERM);
  // Nothing to wait for, so it must not sit out the 600 s drain timeout.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (cluster.Running(coordinator) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(cluster.Running(coordinator)) << cluster.Logs();
  EXPECT_TRUE(WIFEXITED(cluster.coordinator().wait_status) && WEXITSTATUS(cluster.coordinator().wait_status) == 0);
}

}  // namespace
}  // namespace tessera::testing
