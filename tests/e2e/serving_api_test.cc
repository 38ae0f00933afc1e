// The public API's contract over a live cluster: validation, stop conditions, logprobs,
// seeded sampling, Tokenize and GetModelInfo.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/e2e/serving_util.h"
#include "tests/support/cluster.h"
#include "tests/support/test_model.h"
#include "tests/worker/test_expected.h"

namespace tessera {
namespace {

using ::tessera::testing::GreedyIds;
using ::tessera::testing::GreedyText;
using ::tessera::testing::RunStream;
using ::tessera::testing::RunUnary;
using ::tessera::testing::StartStories;
using Health = grpc::health::v1::HealthCheckResponse;

constexpr int kVocab = 512;    // stories260K
constexpr int kContext = 512;  // its max_position_embeddings

struct BadRequest {
  std::string name;
  std::function<void(v1::GenerateRequest*)> mutate;
  std::string field;  // The message must name it.
};

std::vector<BadRequest> BadRequests() {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  return {
      {"empty text", [](auto* r) { r->set_text(""); }, "text"},
      {"no input", [](auto* r) { r->clear_input(); }, "input"},
      {"empty token_ids", [](auto* r) { r->mutable_token_ids(); }, "token_ids"},
      {"token id -1", [](auto* r) { r->mutable_token_ids()->add_ids(-1); }, "token_ids[0]"},
      {"token id = vocab",
       [](auto* r) {
         r->mutable_token_ids()->add_ids(1);
         r->mutable_token_ids()->add_ids(kVocab);
       },
       "token_ids[1]"},
      {"temperature -1", [](auto* r) { r->mutable_sampling()->set_temperature(-1); }, "sampling.temperature"},
      {"temperature NaN", [nan](auto* r) { r->mutable_sampling()->set_temperature(nan); }, "sampling.temperature"},
      {"temperature inf", [inf](auto* r) { r->mutable_sampling()->set_temperature(inf); }, "sampling.temperature"},
      {"top_p 0", [](auto* r) { r->mutable_sampling()->set_top_p(0); }, "sampling.top_p"},
      {"top_p 1.5", [](auto* r) { r->mutable_sampling()->set_top_p(1.5); }, "sampling.top_p"},
      {"top_k -1", [](auto* r) { r->mutable_sampling()->set_top_k(-1); }, "sampling.top_k"},
      {"min_p 1", [](auto* r) { r->mutable_sampling()->set_min_p(1); }, "sampling.min_p"},
      {"repetition_penalty 0", [](auto* r) { r->mutable_sampling()->set_repetition_penalty(0); },
       "sampling.repetition_penalty"},
      {"presence_penalty 3", [](auto* r) { r->mutable_sampling()->set_presence_penalty(3); },
       "sampling.presence_penalty"},
      {"frequency_penalty -3", [](auto* r) { r->mutable_sampling()->set_frequency_penalty(-3); },
       "sampling.frequency_penalty"},
      {"max_new_tokens 0", [](auto* r) { r->mutable_stopping()->set_max_new_tokens(0); },
       "stopping.max_new_tokens"},
      {"max_new_tokens beyond the context", [](auto* r) { r->mutable_stopping()->set_max_new_tokens(kContext + 1); },
       "stopping.max_new_tokens"},
      {"prompt + max_new_tokens beyond the context",
       [](auto* r) { r->mutable_stopping()->set_max_new_tokens(kContext - 2); }, "stopping.max_new_tokens"},
      {"prompt as long as the context",
       [](auto* r) {
         for (int i = 0; i < kContext; ++i) r->mutable_token_ids()->add_ids(300);
       },
       "input"},
      {"17 stop strings",
       [](auto* r) {
         for (int i = 0; i < 17; ++i) r->mutable_stopping()->add_stop(absl::StrCat("s", i));
       },
       "stopping.stop"},
      {"empty stop string",
       [](auto* r) {
         r->mutable_stopping()->add_stop("fine");
         r->mutable_stopping()->add_stop("");
       },
       "stopping.stop[1]"},
      {"300-byte stop string", [](auto* r) { r->mutable_stopping()->add_stop(std::string(300, 'a')); },
       "stopping.stop[0]"},
      {"stop token id = vocab", [](auto* r) { r->mutable_stopping()->add_stop_token_ids(kVocab); },
       "stopping.stop_token_ids[0]"},
      {"stop token id -5",
       [](auto* r) {
         r->mutable_stopping()->add_stop_token_ids(13);
         r->mutable_stopping()->add_stop_token_ids(-5);
       },
       "stopping.stop_token_ids[1]"},
      {"min_new_tokens > max_new_tokens", [](auto* r) { r->mutable_stopping()->set_min_new_tokens(20); },
       "stopping.min_new_tokens"},
      {"logprobs 21", [](auto* r) { r->set_logprobs(21); }, "logprobs"},
      {"300-byte request_id", [](auto* r) { r->set_request_id(std::string(300, 'x')); }, "request_id"},
  };
}

TEST(ServingApiTest, MalformedRequestsAreInvalidArgumentNamingTheField) {
  TESSERA_REQUIRE_STORIES_MODEL();
  auto cluster = StartStories(/*tp=*/1);
  ASSERT_NE(cluster, nullptr);
  const auto cases = BadRequests();
  ASSERT_GE(cases.size(), 20u);
  for (const BadRequest& c : cases) {
    SCOPED_TRACE(c.name);
    v1::GenerateRequest request = GreedyText("Once upon a time", 8);
    c.mutate(&request);
    const auto unary = RunUnary(cluster->api(), request, std::chrono::seconds(30));
    EXPECT_EQ(unary.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << unary.status.error_message();
    EXPECT_NE(unary.status.error_message().find(c.field), std::string::npos)
        << "message \"" << unary.status.error_message() << "\" does not name " << c.field;
    const auto stream = RunStream(cluster->api(), request, std::chrono::seconds(30));
    EXPECT_EQ(stream.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << stream.status.error_message();
    EXPECT_EQ(stream.messages, 0);
    EXPECT_EQ(stream.status.error_message(), unary.status.error_message());
  }
  // None of that hurt the server.
  const auto ok = RunUnary(cluster->api(), GreedyText("Once upon a time", 4));
  EXPECT_TRUE(ok.status.ok()) << ok.status.error_message();
}

TEST(ServingApiTest, StopStringEndsTheTextBeforeIt) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const auto expected = testing::LoadExpected();
  const std::string continuation = expected.generated_text.substr(std::string("Once upon a time").size());
  const size_t at = continuation.find("Lily");
  ASSERT_NE(at, std::string::npos);
  auto cluster = StartStories(/*tp=*/1);
  ASSERT_NE(cluster, nullptr);

  v1::GenerateRequest request = GreedyText("Once upon a time", 60);
  request.mutable_stopping()->add_stop("never appears");
  request.mutable_stopping()->add_stop("Lily");
  const auto unary = RunUnary(cluster->api(), request);
  ASSERT_TRUE(unary.status.ok()) << unary.status.error_message();
  EXPECT_EQ(unary.response.text(), continuation.substr(0, at));
  EXPECT_EQ(unary.response.finish_reason(), v1::FINISH_REASON_STOP);
  const auto ids = unary.ids();
  ASSERT_FALSE(ids.empty());
  ASSERT_LT(ids.size(), expected.generated_ids.size());
  EXPECT_TRUE(std::equal(ids.begin(), ids.end(), expected.generated_ids.begin()));

  // The stream never shows a piece of the stop string, even while it is only a prefix.
  const auto stream = RunStream(cluster->api(), request);
  ASSERT_TRUE(stream.status.ok()) << stream.status.error_message();
  EXPECT_EQ(stream.text, unary.response.text());
  EXPECT_EQ(stream.ids, ids);
  EXPECT_EQ(stream.last.finish_reason(), v1::FINISH_REASON_STOP);
}

TEST(ServingApiTest, StopTokenIdEndsAfterThatToken) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const auto expected = testing::LoadExpected();
  auto cluster = StartStories(/*tp=*/1);
  ASSERT_NE(cluster, nullptr);
  const int32_t stop_id = expected.generated_ids[9];
  const auto first = std::find(expected.generated_ids.begin(), expected.generated_ids.end(), stop_id);
  const std::vector<int32_t> want(expected.generated_ids.begin(), first + 1);

  v1::GenerateRequest request = GreedyIds(expected.prompt_ids, 60);
  request.mutable_stopping()->add_stop_token_ids(stop_id);
  const auto unary = RunUnary(cluster->api(), request);
  ASSERT_TRUE(unary.status.ok()) << unary.status.error_message();
  EXPECT_EQ(unary.ids(), want);
  EXPECT_EQ(unary.response.finish_reason(), v1::FINISH_REASON_STOP);

  // min_new_tokens holds the stop token off until that many tokens exist.
  const int64_t first_index = first - expected.generated_ids.begin();
  request.mutable_stopping()->set_min_new_tokens(static_cast<uint32_t>(first_index + 2));
  const auto later = RunUnary(cluster->api(), request);
  ASSERT_TRUE(later.status.ok()) << later.status.error_message();
  const auto more = later.ids();
  EXPECT_GT(more.size(), want.size());
  EXPECT_TRUE(std::equal(more.begin(), more.end(), expected.generated_ids.begin()));
  EXPECT_TRUE(more.back() == stop_id || more.size() == 60u) << "ended on " << more.back();
}

TEST(ServingApiTest, LogprobsDescribeTheChosenTokens) {
  TESSERA_REQUIRE_STORIES_MODEL();
  auto cluster = StartStories(/*tp=*/2);
  ASSERT_NE(cluster, nullptr);
  v1::GenerateRequest request = GreedyText("Once upon a time", 12);
  request.set_logprobs(5);
  const auto unary = RunUnary(cluster->api(), request);
  ASSERT_TRUE(unary.status.ok()) << unary.status.error_message();
  const auto& r = unary.response;
  ASSERT_EQ(r.logprobs_size(), r.token_ids_size());
  for (int i = 0; i < r.logprobs_size(); ++i) {
    SCOPED_TRACE("token " + std::to_string(i));
    const v1::TokenLogprob& lp = r.logprobs(i);
    EXPECT_EQ(lp.token_id(), r.token_ids(i));
    ASSERT_EQ(lp.top_size(), 5);
    double mass = 0;
    for (int k = 0; k < lp.top_size(); ++k) {
      EXPECT_LE(lp.top(k).logprob(), 0.0f);
      if (k > 0) {
        EXPECT_LE(lp.top(k).logprob(), lp.top(k - 1).logprob());
      }
      mass += std::exp(lp.top(k).logprob());
    }
    EXPECT_LE(mass, 1.0 + 1e-4);
    // Greedy picks the most likely token.
    EXPECT_EQ(lp.top(0).token_id(), lp.token_id());
    EXPECT_NEAR(lp.top(0).logprob(), lp.logprob(), 1e-5);
  }
  const auto stream = RunStream(cluster->api(), request);
  ASSERT_TRUE(stream.status.ok()) << stream.status.error_message();
  ASSERT_EQ(stream.logprobs.size(), static_cast<size_t>(r.logprobs_size()));
  for (size_t i = 0; i < stream.logprobs.size(); ++i) {
    EXPECT_EQ(stream.logprobs[i].token_id(), r.logprobs(i).token_id());
    EXPECT_NEAR(stream.logprobs[i].logprob(), r.logprobs(i).logprob(), 1e-5);
  }
  // Without the field, no logprobs.
  const auto plain = RunUnary(cluster->api(), GreedyText("Once upon a time", 4));
  ASSERT_TRUE(plain.status.ok());
  EXPECT_EQ(plain.response.logprobs_size(), 0);
}

TEST(ServingApiTest, SameSeedSameTokens) {
  TESSERA_REQUIRE_STORIES_MODEL();
  auto cluster = StartStories(/*tp=*/1);
  ASSERT_NE(cluster, nullptr);
  v1::GenerateRequest request = GreedyText("Once upon a time", 40);
  request.mutable_sampling()->set_temperature(1.0);
  request.mutable_sampling()->set_top_p(0.95f);
  request.mutable_sampling()->set_seed(1234);
  const auto a = RunUnary(cluster->api(), request);
  const auto b = RunUnary(cluster->api(), request);
  const auto s = RunStream(cluster->api(), request);
  ASSERT_TRUE(a.status.ok()) << a.status.error_message();
  ASSERT_TRUE(b.status.ok()) << b.status.error_message();
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  ASSERT_EQ(a.ids().size(), 40u);
  EXPECT_EQ(a.ids(), b.ids());
  EXPECT_EQ(a.ids(), s.ids);
  EXPECT_EQ(a.response.text(), s.text);

  // Sampling at temperature 1 over 40 tokens with 4 different seeds: at least one differs
  // from seed 1234's draw (all four equal would mean the seed is ignored).
  int different = 0;
  for (uint64_t seed : {1u, 2u, 3u, 4u}) {
    request.mutable_sampling()->set_seed(seed);
    const auto other = RunUnary(cluster->api(), request);
    ASSERT_TRUE(other.status.ok()) << other.status.error_message();
    different += other.ids() != a.ids();
  }
  EXPECT_GT(different, 0);
}

TEST(ServingApiTest, TokenizeMatchesTheReferencePromptIds) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const auto expected = testing::LoadExpected();
  auto cluster = StartStories(/*tp=*/1);
  ASSERT_NE(cluster, nullptr);
  for (bool special : {true, false}) {
    SCOPED_TRACE(special ? "with BOS" : "without BOS");
    grpc::ClientContext ctx;
    ctx.set_deadline(testing::DeadlineIn(std::chrono::seconds(30)));
    v1::TokenizeRequest req;
    req.set_text("Once upon a time");
    req.set_add_special_tokens(special);
    v1::TokenizeResponse resp;
    const grpc::Status s = cluster->api().Tokenize(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    std::vector<int32_t> want = expected.prompt_ids;
    if (!special) want.erase(want.begin());
    EXPECT_EQ(std::vector<int32_t>(resp.token_ids().begin(), resp.token_ids().end()), want);
    ASSERT_EQ(resp.pieces_size(), resp.token_ids_size());
    std::string joined;
    for (int i = special ? 1 : 0; i < resp.pieces_size(); ++i) joined += resp.pieces(i);
    EXPECT_NE(joined.find("upon"), std::string::npos) << joined;
  }
}

TEST(ServingApiTest, ModelInfoDescribesTheCluster) {
  TESSERA_REQUIRE_STORIES_MODEL();
  auto cluster = StartStories(/*tp=*/2, /*replicas=*/2);
  ASSERT_NE(cluster, nullptr);
  EXPECT_EQ(cluster->Health(), Health::SERVING);
  EXPECT_EQ(cluster->Health("tessera.v1.Generation"), Health::SERVING);
  // Start() returns once a replica serves; the other may still be in its one-token
  // warm-up, so wait (bounded) until both are ready and idle before reading the figures.
  auto info = cluster->ModelInfo();
  const auto settle = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  const auto settled = [](const v1::ModelInfo& m) {
    if (m.ready_replicas() != 2) return false;
    for (const v1::ReplicaInfo& r : m.replica_info()) {
      if (r.running() + r.waiting() != 0 || r.free_blocks() != r.total_blocks()) return false;
    }
    return true;
  };
  while (info.ok() && !settled(*info) && std::chrono::steady_clock::now() < settle) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    info = cluster->ModelInfo();
  }
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->model(), "stories260K");
  EXPECT_FALSE(info->dtype().empty());
  EXPECT_EQ(info->tp(), 2u);
  EXPECT_EQ(info->replicas(), 2u);
  EXPECT_EQ(info->block_size(), 16u);
  EXPECT_EQ(info->max_context(), static_cast<uint32_t>(kContext));
  EXPECT_EQ(info->vocab_size(), static_cast<uint32_t>(kVocab));
  EXPECT_EQ(info->ready_replicas(), 2u);
  ASSERT_EQ(info->replica_info_size(), 2);
  uint64_t tokens = 0;
  for (const v1::ReplicaInfo& r : info->replica_info()) {
    EXPECT_TRUE(r.healthy());
    EXPECT_GT(r.total_blocks(), 0u);
    EXPECT_EQ(r.free_blocks(), r.total_blocks()) << "idle replica " << r.replica();
    EXPECT_EQ(r.running() + r.waiting(), 0u);
    tokens += static_cast<uint64_t>(r.total_blocks()) * 16;
    // How its ranks started: the largest over them. A rank's KV cache is its share (half
    // the KV heads) of every block, within the 16 MiB budget StartStories gives it.
    const v1::ReplicaMemory& m = r.memory();
    EXPECT_GT(m.load_seconds(), 0) << "replica " << r.replica();
    EXPECT_GT(m.weight_bytes(), 0u);
    EXPECT_GT(m.device_total_bytes(), m.weight_bytes());
    EXPECT_GE(m.kv_cache_bytes(), uint64_t{r.total_blocks()} * 1280 / 2 * 16);
    EXPECT_LE(m.kv_cache_bytes(), uint64_t{16} << 20);
  }
  EXPECT_GT(info->kv_capacity_tokens(), 0u);
  EXPECT_EQ(info->kv_capacity_tokens(), tokens);
  // stories260K is F32: "auto" keeps an F32 cache; 5 layers x 2 x 4 heads x 8 x 4 bytes.
  EXPECT_EQ(info->quantization(), "none");
  EXPECT_EQ(info->kv_cache_dtype(), "fp32");
  EXPECT_EQ(info->kv_cache_bytes_per_token(), 1280u);
  // stories260K: dense, so every parameter is active (embeddings tied).
  EXPECT_EQ(info->total_parameters(), 260032u);
  EXPECT_EQ(info->active_parameters(), info->total_parameters());
  EXPECT_EQ(info->num_experts(), 0u);
  EXPECT_FALSE(info->expert_parallel());

  // Both replicas serve: the reference continuation comes back from each replica index
  // the router picks.
  const auto expected = testing::LoadExpected();
  for (int i = 0; i < 4; ++i) {
    const auto r = RunUnary(cluster->api(), GreedyText("Once upon a time", 60));
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.ids(), expected.generated_ids);
    EXPECT_LT(r.response.replica(), 2u);
  }
}

// A BF16 cache halves the bytes of a token, so the same KV budget holds twice the tokens,
// and stories260K still produces its reference continuation; FP8 holds more again.
TEST(ServingApiTest, KvCacheDTypeShowsInModelInfoAndCapacity) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const auto expected = testing::LoadExpected();
  for (const auto& [flag, bytes_per_token] :
       std::vector<std::pair<std::string, uint64_t>>{{"bf16", 640}, {"fp8", 480}}) {
    SCOPED_TRACE(flag);
    testing::ClusterOptions options;
    options.coordinator_flags = {"--kv-cache-dtype=" + flag};
    auto cluster = StartStories(/*tp=*/1, /*replicas=*/1, options);
    ASSERT_NE(cluster, nullptr);
    auto info = cluster->ModelInfo();
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->kv_cache_dtype(), flag);
    EXPECT_EQ(info->kv_cache_bytes_per_token(), bytes_per_token);
    // 16 MiB per worker (StartStories), blocks of 16 tokens.
    const uint64_t blocks = (uint64_t{16} << 20) / (bytes_per_token * 16);
    EXPECT_LE(info->kv_capacity_tokens(), blocks * 16);
    EXPECT_GE(info->kv_capacity_tokens(), (blocks - 1) * 16);  // Block 0 may be held back.
    const auto r = RunUnary(cluster->api(), GreedyText("Once upon a time", 60));
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    if (flag == "bf16") {
      EXPECT_EQ(r.ids(), expected.generated_ids);
    } else {
      EXPECT_EQ(r.ids().size(), expected.generated_ids.size());
    }
  }
}

}  // namespace
}  // namespace tessera
