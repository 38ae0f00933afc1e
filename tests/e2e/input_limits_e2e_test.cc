// The front door's memory under large inputs (--max-inflight-input-bytes, the tokenizer's
// chunking, the raw Tokenize answer, malloc_trim after large inputs), the HTTP JSON limits
// and the Content-Type rule, against a real coordinator and worker.

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/e2e/http_get.h"
#include "tests/e2e/serving_util.h"
#include "tests/support/sanitizers.h"

namespace tessera::testing {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// About `bytes` of story text (what stories260K's tokenizer was made for).
std::string StoryText(size_t bytes) {
  const std::string paragraph =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. "
      "One day, she saw a big red ball in the park and ran to get it. \"Mom, look!\" she said.\n";
  std::string text;
  text.reserve(bytes + paragraph.size());
  while (text.size() < bytes) text += paragraph;
  return text;
}

// Polls until the coordinator's RSS is at most `limit`; its last reading.
uint64_t WaitForRss(pid_t pid, uint64_t limit, std::chrono::seconds within) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  uint64_t rss = ProcStatusBytes(pid, "VmRSS");
  while (rss > limit && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    rss = ProcStatusBytes(pid, "VmRSS");
  }
  return rss;
}

// Four 50 MB Tokenize calls at once with --max-input-bytes at its 64 MiB ceiling: each is
// answered or refused at once with RESOURCE_EXHAUSTED naming --max-inflight-input-bytes,
// the coordinator's peak stays under 1 GB (it was 5 GB), and afterwards its RSS comes
// back to within 200 MB of where it started (3.85 GB stayed held before).
TEST(InputLimitsTest, ConcurrentHugeTokenizeIsBoundedAndGivesMemoryBack) {
  TESSERA_REQUIRE_STORIES_MODEL();
  // What it measures is RSS, which ASan's allocator decides there; and four 50 MB inputs
  // take most of the test's time limit under ASan.
  if (kUnderAddressSanitizer) GTEST_SKIP() << "memory bounds are measured in the Release suite";
  ClusterOptions options;
  options.coordinator_flags = {"--max-input-bytes=67108864"};
  auto cluster = StartStories(/*tp=*/1, 1, options);
  ASSERT_NE(cluster, nullptr);
  const pid_t pid = cluster->coordinator().pid;

  {  // Warm up (the per-id piece table) before taking the baseline.
    grpc::ClientContext context;
    v1::TokenizeRequest request;
    request.set_text("Once upon a time");
    v1::TokenizeResponse response;
    ASSERT_TRUE(cluster->api().Tokenize(&context, request, &response).ok());
  }
  const uint64_t start_rss = ProcStatusBytes(pid, "VmRSS");
  const uint64_t start_hwm = ProcStatusBytes(pid, "VmHWM");

  const std::string text = StoryText(50'000'000);
  std::vector<grpc::Status> statuses(4);
  std::vector<int> num_tokens(4, 0);
  std::vector<std::thread> callers;
  for (int i = 0; i < 4; ++i) {
    callers.emplace_back([&, i] {
      grpc::ChannelArguments args;
      args.SetMaxReceiveMessageSize(-1);
      args.SetMaxSendMessageSize(-1);
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // A connection of its own.
      auto channel = grpc::CreateCustomChannel(cluster->address(),
                                               grpc::InsecureChannelCredentials(), args);
      auto stub = v1::Generation::NewStub(channel);
      grpc::ClientContext context;
      context.set_deadline(DeadlineIn(std::chrono::seconds(240)));
      v1::TokenizeRequest request;
      request.set_text(text);
      v1::TokenizeResponse response;
      statuses[i] = stub->Tokenize(&context, request, &response);
      num_tokens[i] = response.token_ids_size();
    });
  }
  for (std::thread& t : callers) t.join();
  const uint64_t peak = ProcStatusBytes(pid, "VmHWM");

  int answered = 0;
  for (int i = 0; i < 4; ++i) {
    if (statuses[i].ok()) {
      ++answered;
      EXPECT_GT(num_tokens[i], 5'000'000) << i;
    } else {
      EXPECT_EQ(statuses[i].error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << i << ": " << statuses[i].error_message();
      EXPECT_TRUE(absl::StrContains(statuses[i].error_message(), "--max-inflight-input-bytes")) << statuses[i].error_message();
    }
  }
  EXPECT_GE(answered, 1);
  std::printf("coordinator: RSS before %.0f MiB (peak before %.0f MiB), peak during %.0f MiB, %d of 4 answered\n",
              start_rss / double(kMiB), start_hwm / double(kMiB), peak / double(kMiB), answered);
  if (!kUnderAddressSanitizer) EXPECT_LT(peak, 1000 * kMiB);

  const uint64_t after = WaitForRss(pid, start_rss + 200 * kMiB, std::chrono::seconds(10));
  std::printf("coordinator: RSS after %.0f MiB\n", after / double(kMiB));
  if (!kUnderAddressSanitizer) EXPECT_LE(after, start_rss + 200 * kMiB);

  UnaryResult small = RunUnary(cluster->api(), GreedyText("Once upon a time", 4));
  EXPECT_TRUE(small.status.ok()) << small.status.error_message();
  EXPECT_EQ(small.response.token_ids_size(), 4);
}

// A 60 MB body nested 30M levels deep is refused (400, naming the depth limit) before any
// DOM is built; so is a flat 60 MB array of numbers (naming the value limit); neither
// takes more than a few times its size. POST bodies must be declared JSON (415 else).
TEST(InputLimitsTest, HttpJsonShapeAndContentType) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const int http_port = PickFreePort();
  ClusterOptions options;
  options.coordinator_flags = {"--max-input-bytes=67108864", "--http-port", absl::StrCat(http_port)};
  auto cluster = StartStories(/*tp=*/1, 1, options);
  ASSERT_NE(cluster, nullptr);
  const pid_t pid = cluster->coordinator().pid;
  const std::string completion = R"({"prompt": "Once upon a time", "max_tokens": 4})";
  for (int i = 0; i < 100 && !Accepts(http_port); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_EQ(HttpRequest(http_port, "POST", "/v1/completions", completion, "", 60).status, 200);
  const uint64_t start_rss = ProcStatusBytes(pid, "VmRSS");

  {
    const size_t depth = 30'000'000;
    std::string deep(depth, '[');
    deep.append(depth, ']');
    HttpResponse r = HttpRequest(http_port, "POST", "/v1/completions", deep, "", 120);
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_TRUE(absl::StrContains(r.body, "128 levels")) << r.body;
  }
  uint64_t peak = ProcStatusBytes(pid, "VmHWM");
  std::printf("coordinator: RSS before %.0f MiB, peak after the deep body %.0f MiB\n", start_rss / double(kMiB),
              peak / double(kMiB));
  if (!kUnderAddressSanitizer) EXPECT_LT(peak, start_rss + 400 * kMiB);

  {
    std::string flat = R"({"prompt": "Once upon a time", "max_tokens": 4, "junk": [1)";
    flat.reserve(60'000'000);
    while (flat.size() < 60'000'000) flat += ",1";
    flat += "]}";
    HttpResponse r = HttpRequest(http_port, "POST", "/v1/completions", flat, "", 120);
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_TRUE(absl::StrContains(r.body, "JSON values")) << r.body;
  }
  peak = ProcStatusBytes(pid, "VmHWM");
  std::printf("coordinator: peak after the flat body %.0f MiB\n", peak / double(kMiB));
  if (!kUnderAddressSanitizer) EXPECT_LT(peak, start_rss + 400 * kMiB);
  const uint64_t after = WaitForRss(pid, start_rss + 100 * kMiB, std::chrono::seconds(10));
  std::printf("coordinator: RSS after %.0f MiB\n", after / double(kMiB));
  if (!kUnderAddressSanitizer) EXPECT_LE(after, start_rss + 100 * kMiB);

  HttpResponse plain = HttpRequest(http_port, "POST", "/v1/completions", completion, "", 60, "text/plain");
  EXPECT_EQ(plain.status, 415) << plain.body;
  EXPECT_TRUE(absl::StrContains(plain.body, "application/json")) << plain.body;
  EXPECT_TRUE(absl::StrContains(plain.body, "invalid_request_error")) << plain.body;
  EXPECT_EQ(HttpRequest(http_port, "POST", "/v1/completions", completion, "", 60, "application/x-www-form-urlencoded").status,
            415);
  EXPECT_EQ(HttpRequest(http_port, "POST", "/v1/completions", completion, "", 60, "application/json; charset=utf-8").status,
            200);
  EXPECT_EQ(HttpRequest(http_port, "POST", "/v1/completions", completion, "", 60, "Application/JSON").status, 200);
}

}  // namespace
}  // namespace tessera::testing
