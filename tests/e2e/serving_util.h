#ifndef TESSERA_TESTS_E2E_SERVING_UTIL_H_
#define TESSERA_TESTS_E2E_SERVING_UTIL_H_

// Request builders and RPC runners shared by the serving end-to-end tests.

#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tessera/v1/generation.grpc.pb.h"
#include "tests/support/cluster.h"
#include "tests/support/test_model.h"

namespace tessera::testing {

inline constexpr auto kRpcTimeout = std::chrono::seconds(120);

inline std::chrono::system_clock::time_point DeadlineIn(std::chrono::milliseconds d) {
  return std::chrono::system_clock::now() + d;
}

// Starts stories260K with tp x replicas workers; nullptr (and a test failure with the
// process logs) when it does not come up.
// Polls `pred` every 20 ms until it holds or `limit` passes; the last answer.
template <typename Pred>
bool WaitFor(Pred pred, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

// A prompt of `n` ids: BOS, then ids drawn from stories260K's ordinary tokens by `seed`.
inline std::vector<int32_t> RandomIds(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids = {1};
  for (int i = 1; i < n; ++i) ids.push_back(static_cast<int32_t>(259 + rng() % 253));
  return ids;
}

inline std::unique_ptr<Cluster> StartStories(int tp, int replicas = 1, ClusterOptions options = {}) {
  options.model_dir = StoriesModelDir();
  options.log_dir = ScratchDir("cluster");
  options.tp = tp;
  options.replicas = replicas;
  if (options.kv_memory_mb == 0) options.kv_memory_mb = 16;
  auto cluster = Cluster::Start(std::move(options));
  if (!cluster.ok()) {
    ADD_FAILURE() << cluster.status().message();
    return nullptr;
  }
  return std::move(*cluster);
}

inline v1::GenerateRequest GreedyText(const std::string& text, int max_new_tokens, bool ignore_eos = true) {
  v1::GenerateRequest r;
  r.set_text(text);
  r.mutable_sampling()->set_temperature(0);
  r.mutable_stopping()->set_max_new_tokens(max_new_tokens);
  r.mutable_stopping()->set_ignore_eos(ignore_eos);
  return r;
}

inline v1::GenerateRequest GreedyIds(const std::vector<int32_t>& ids, int max_new_tokens,
                                     bool ignore_eos = true) {
  v1::GenerateRequest r;
  r.mutable_token_ids()->mutable_ids()->Add(ids.begin(), ids.end());
  r.mutable_sampling()->set_temperature(0);
  r.mutable_stopping()->set_max_new_tokens(max_new_tokens);
  r.mutable_stopping()->set_ignore_eos(ignore_eos);
  return r;
}

struct UnaryResult {
  grpc::Status status;
  v1::GenerateResponse response;
  std::vector<int32_t> ids() const { return {response.token_ids().begin(), response.token_ids().end()}; }
};

inline UnaryResult RunUnary(v1::Generation::Stub& stub, const v1::GenerateRequest& request,
                            std::chrono::milliseconds timeout = kRpcTimeout) {
  UnaryResult r;
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(timeout));
  r.status = stub.Generate(&ctx, request, &r.response);
  return r;
}

// A whole stream, concatenated.
struct StreamResult {
  grpc::Status status;
  std::vector<int32_t> prompt_ids;  // From the first message.
  std::vector<int32_t> ids;
  std::string text;
  std::vector<v1::TokenLogprob> logprobs;
  int messages = 0;
  int messages_with_prompt_ids = 0;
  int messages_with_finish_reason = 0;
  v1::GenerateStreamResponse last;
};

inline StreamResult RunStream(v1::Generation::Stub& stub, const v1::GenerateRequest& request,
                              std::chrono::milliseconds timeout = kRpcTimeout) {
  StreamResult r;
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(timeout));
  auto reader = stub.GenerateStream(&ctx, request);
  v1::GenerateStreamResponse msg;
  while (reader->Read(&msg)) {
    if (r.messages == 0) r.prompt_ids.assign(msg.prompt_ids().begin(), msg.prompt_ids().end());
    ++r.messages;
    if (msg.prompt_ids_size() > 0) ++r.messages_with_prompt_ids;
    if (msg.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) ++r.messages_with_finish_reason;
    r.ids.insert(r.ids.end(), msg.token_ids().begin(), msg.token_ids().end());
    r.text += msg.text();
    r.logprobs.insert(r.logprobs.end(), msg.logprobs().begin(), msg.logprobs().end());
    r.last = msg;
  }
  r.status = reader->Finish();
  return r;
}

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_E2E_SERVING_UTIL_H_
