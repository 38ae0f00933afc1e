// Distributed serving as a client sees it: a real coordinator and real workers on this
// machine, reached over the public gRPC API.
#include <latch>
#include <thread>

#include "gtest/gtest.h"
#include "tests/e2e/serving_util.h"
#include "tests/support/cluster.h"
#include "tests/support/test_model.h"
#include "tests/worker/test_expected.h"

namespace tessera {
namespace {

using ::tessera::testing::Cluster;
using ::tessera::testing::GreedyIds;
using ::tessera::testing::GreedyText;
using ::tessera::testing::RunStream;
using ::tessera::testing::RunUnary;
using ::tessera::testing::StartStories;
using Health = grpc::health::v1::HealthCheckResponse;
using Clock = std::chrono::steady_clock;

class GreedyReferenceTest : public ::testing::TestWithParam<int> {};

// The reference continuation over both RPCs, for every tensor-parallel degree.
TEST_P(GreedyReferenceTest, UnaryAndStreamMatchReference) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const auto expected = testing::LoadExpected();
  auto cluster = StartStories(GetParam());
  ASSERT_NE(cluster, nullptr);
  const v1::GenerateRequest request = GreedyText("Once upon a time", 60);

  const auto unary = RunUnary(cluster->api(), request);
  ASSERT_TRUE(unary.status.ok()) << unary.status.error_message() << "\n" << cluster->Logs();
  const v1::GenerateResponse& r = unary.response;
  EXPECT_EQ(std::vector<int32_t>(r.prompt_ids().begin(), r.prompt_ids().end()), expected.prompt_ids);
  EXPECT_EQ(unary.ids(), expected.generated_ids);
  EXPECT_EQ("Once upon a time" + r.text(), expected.generated_text);
  EXPECT_EQ(r.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(r.usage().prompt_tokens(), expected.prompt_ids.size());
  EXPECT_EQ(r.usage().completion_tokens(), 60u);
  EXPECT_FALSE(r.request_id().empty());

  const auto stream = RunStream(cluster->api(), request);
  ASSERT_TRUE(stream.status.ok()) << stream.status.error_message() << "\n" << cluster->Logs();
  EXPECT_EQ(stream.prompt_ids, expected.prompt_ids);
  EXPECT_EQ(stream.messages_with_prompt_ids, 1) << "prompt_ids belong to the first message only";
  EXPECT_EQ(stream.ids, unary.ids());
  EXPECT_EQ(stream.text, r.text());
  EXPECT_GT(stream.messages, 1) << "a 60-token generation should stream in several messages";
  EXPECT_EQ(stream.messages_with_finish_reason, 1);
  EXPECT_EQ(stream.last.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(stream.last.usage().completion_tokens(), 60u);
}

INSTANTIATE_TEST_SUITE_P(Tp, GreedyReferenceTest, ::testing::Values(1, 2, 4),
                         [](const auto& info) { return "tp" + std::to_string(info.param); });

// Batching must not change anyone's greedy continuation.
TEST(ServingConcurrencyTest, SixteenConcurrentStreamsMatchTheirSoloRuns) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const auto expected = testing::LoadExpected();
  auto cluster = StartStories(/*tp=*/2);
  ASSERT_NE(cluster, nullptr);

  std::vector<v1::GenerateRequest> requests;
  const std::vector<std::string> texts = {"Once upon a time", "The little dog",  "Tom had a red ball",
                                          "One day",          "Lily wanted to",  "The sun was hot",
                                          "Ben and Mia",      "There was a big tree"};
  for (size_t i = 0; i < texts.size(); ++i) {
    requests.push_back(GreedyText(texts[i], 8 + 13 * static_cast<int>(i), /*ignore_eos=*/i % 2 == 0));
  }
  std::vector<std::vector<int32_t>> id_prompts = {{1, 300, 301, 302}, {1, 410, 408}, {1, 261}, {1, 432, 383, 286}};
  for (int k : {3, 7, 12, 20}) {
    std::vector<int32_t> p = expected.prompt_ids;
    p.insert(p.end(), expected.generated_ids.begin(), expected.generated_ids.begin() + k);
    id_prompts.push_back(p);
  }
  for (size_t i = 0; i < id_prompts.size(); ++i) {
    requests.push_back(GreedyIds(id_prompts[i], 100 - 11 * static_cast<int>(i), /*ignore_eos=*/i % 2 == 1));
  }
  ASSERT_EQ(requests.size(), 16u);

  std::vector<std::vector<int32_t>> solo(requests.size());
  std::vector<std::string> solo_text(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto r = RunUnary(cluster->api(), requests[i]);
    ASSERT_TRUE(r.status.ok()) << "request " << i << ": " << r.status.error_message();
    ASSERT_FALSE(r.ids().empty()) << "request " << i;
    solo[i] = r.ids();
    solo_text[i] = r.response.text();
  }

  std::vector<testing::StreamResult> together(requests.size());
  std::latch start(static_cast<std::ptrdiff_t>(requests.size()));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < requests.size(); ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      together[i] = RunStream(cluster->api(), requests[i]);
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i) + ": " + requests[i].ShortDebugString());
    ASSERT_TRUE(together[i].status.ok()) << together[i].status.error_message();
    EXPECT_EQ(together[i].ids, solo[i]);
    EXPECT_EQ(together[i].text, solo_text[i]);
  }
}

// A client that goes away mid-stream gets CANCELLED and its KV blocks come back.
TEST(ServingCancelTest, CancelMidStreamFreesBlocks) {
  TESSERA_REQUIRE_STORIES_MODEL();
  auto cluster = StartStories(/*tp=*/1);
  ASSERT_NE(cluster, nullptr);
  auto idle = cluster->ModelInfo();
  ASSERT_TRUE(idle.ok()) << idle.status();
  ASSERT_EQ(idle->replica_info_size(), 1);
  const uint32_t idle_free = idle->replica_info(0).free_blocks();

  grpc::ClientContext ctx;
  ctx.set_deadline(testing::DeadlineIn(testing::kRpcTimeout));
  auto reader = cluster->api().GenerateStream(&ctx, GreedyText("Once upon a time", 500));
  v1::GenerateStreamResponse msg;
  int received = 0;
  while (received < 3 && reader->Read(&msg)) {
    ++received;
    ASSERT_EQ(msg.finish_reason(), v1::FINISH_REASON_UNSPECIFIED) << "finished before the cancel";
  }
  ASSERT_EQ(received, 3);
  auto busy = cluster->ModelInfo();
  ASSERT_TRUE(busy.ok()) << busy.status();
  EXPECT_LT(busy->replica_info(0).free_blocks(), idle_free) << "the running request holds no blocks";

  const auto cancelled_at = Clock::now();
  ctx.TryCancel();
  while (reader->Read(&msg)) {
  }
  const grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED) << status.error_message();

  // The server notices within one poll of its handler and frees the blocks within a step.
  uint32_t free_now = 0, running = 1;
  while (Clock::now() - cancelled_at < std::chrono::seconds(2)) {
    auto info = cluster->ModelInfo();
    ASSERT_TRUE(info.ok()) << info.status();
    free_now = info->replica_info(0).free_blocks();
    running = info->replica_info(0).running();
    if (free_now == idle_free && running == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(free_now, idle_free) << "blocks not returned after the cancel\n" << cluster->Logs();
  EXPECT_EQ(running, 0u);

  // And the server keeps serving.
  const auto after = RunUnary(cluster->api(), GreedyText("Once upon a time", 4));
  EXPECT_TRUE(after.status.ok()) << after.status.error_message();
}

// A deadline ends a unary call the same way, and frees its blocks too.
TEST(ServingCancelTest, DeadlineEndsUnaryCallAndFreesBlocks) {
  TESSERA_REQUIRE_STORIES_MODEL();
  auto cluster = StartStories(/*tp=*/1);
  ASSERT_NE(cluster, nullptr);
  auto idle = cluster->ModelInfo();
  ASSERT_TRUE(idle.ok()) << idle.status();
  const uint32_t idle_free = idle->replica_info(0).free_blocks();

  // 500 tokens take far longer than 50 ms here (1-3 ms a step), so the deadline hits first.
  const auto r = RunUnary(cluster->api(), GreedyText("Once upon a time", 500), std::chrono::milliseconds(50));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << r.status.error_message();
  uint32_t free_now = 0;
  const auto until = Clock::now() + std::chrono::seconds(3);
  while (Clock::now() < until) {
    auto info = cluster->ModelInfo();
    ASSERT_TRUE(info.ok()) << info.status();
    free_now = info->replica_info(0).free_blocks();
    if (free_now == idle_free && info->replica_info(0).running() == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(free_now, idle_free);
}

// A rank that dies fails its group's requests quickly and visibly; nothing hangs.
TEST(ServingFailureTest, KilledWorkerFailsRequestsWithUnavailable) {
  TESSERA_REQUIRE_STORIES_MODEL();
  testing::ClusterOptions options;
  // The surviving rank waits in a collective for its dead peer until this timeout; a
  // short one lets it (and the test) finish sooner.
  options.coordinator_flags = {"--collective-timeout-ms", "2000"};
  auto cluster = StartStories(/*tp=*/2, /*replicas=*/1, options);
  ASSERT_NE(cluster, nullptr);
  const std::vector<pid_t> workers = cluster->worker_pids();
  ASSERT_EQ(workers.size(), 2u);

  grpc::ClientContext ctx;
  ctx.set_deadline(testing::DeadlineIn(std::chrono::seconds(60)));
  auto reader = cluster->api().GenerateStream(&ctx, GreedyText("Once upon a time", 500));
  v1::GenerateStreamResponse msg;
  int received = 0;
  while (received < 2 && reader->Read(&msg)) ++received;
  ASSERT_EQ(received, 2);
  ASSERT_EQ(msg.finish_reason(), v1::FINISH_REASON_UNSPECIFIED) << "finished before the kill";

  const auto killed_at = Clock::now();
  cluster->Signal(workers[1], SIGKILL);
  while (reader->Read(&msg)) {
  }
  const grpc::Status status = reader->Finish();
  const double seconds = std::chrono::duration<double>(Clock::now() - killed_at).count();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_FALSE(status.error_message().empty());
  EXPECT_LT(seconds, 5.0) << "the in-flight request took " << seconds << " s to fail";

  EXPECT_TRUE(cluster->Running(cluster->coordinator().pid)) << cluster->Logs();
  EXPECT_TRUE(cluster->WaitForHealth(Health::NOT_SERVING, std::chrono::seconds(2)))
      << "health still says " << cluster->Health();

  // New work is refused at once: UNAVAILABLE, not a wait for the deadline.
  const auto asked_at = Clock::now();
  const auto unary = RunUnary(cluster->api(), GreedyText("Once upon a time", 8), std::chrono::seconds(3));
  const double refuse_seconds = std::chrono::duration<double>(Clock::now() - asked_at).count();
  EXPECT_EQ(unary.status.error_code(), grpc::StatusCode::UNAVAILABLE) << unary.status.error_message();
  EXPECT_NE(unary.status.error_message().find("replica"), std::string::npos) << unary.status.error_message();
  const auto stream = RunStream(cluster->api(), GreedyText("Once upon a time", 8), std::chrono::seconds(3));
  EXPECT_EQ(stream.status.error_code(), grpc::StatusCode::UNAVAILABLE) << stream.status.error_message();
  std::printf("in-flight request failed after %.3f s; a new one was refused after %.3f s\n", seconds,
              refuse_seconds);

  auto info = cluster->ModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->ready_replicas(), 0u);
  EXPECT_TRUE(cluster->Running(cluster->coordinator().pid)) << cluster->Logs();
  EXPECT_TRUE(cluster->Running(workers[0])) << "the surviving rank crashed\n" << cluster->Logs();
}

}  // namespace
}  // namespace tessera
