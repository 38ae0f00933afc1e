// SmolLM2-135M-Instruct, a real trained chat model, served straight from its Q4_1 GGUF
// file (int4 weights with the file's codes, a Q8_0 embedding): the gRPC API answers a chat
// question with the fact, tp 3 gives the same greedy tokens as tp 1 (9 query heads and 3
// KV heads split three ways; the 30 layers' 4-bit slices cut along 32-column groups), and a
// tp that cannot shard 9 heads is refused at startup with the sizes that would work.
#include <chrono>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/e2e/serving_util.h"
#include "tests/support/cluster.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_model.h"

namespace tessera {
namespace {

v1::GenerateRequest GreedyChat(const std::string& question, int max_new_tokens) {
  v1::GenerateRequest r;
  v1::ChatMessage* m = r.mutable_messages()->add_messages();
  m->set_role("user");
  m->set_content(question);
  r.mutable_sampling()->set_temperature(0);
  r.mutable_stopping()->set_max_new_tokens(max_new_tokens);
  return r;
}

// Greedy ids of a fixed set of prompts (plain text and chat) from a cluster of `tp` ranks.
std::vector<std::vector<int32_t>> GreedyIdsAtTp(int tp) {
  testing::ClusterOptions options;
  options.model_dir = testing::SmolLm2Gguf();
  options.log_dir = testing::ScratchDir("tp" + std::to_string(tp));
  options.tp = tp;
  options.kv_memory_mb = 64;
  auto cluster = testing::Cluster::Start(options);
  if (!cluster.ok()) {
    ADD_FAILURE() << cluster.status().message();
    return {};
  }
  std::vector<v1::GenerateRequest> requests = {
      testing::GreedyText("The three primary colors are", 48),
      testing::GreedyText("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n", 48),
      GreedyChat("Write a haiku about the sea.", 48),
      GreedyChat("What is 12 times 7?", 48),
  };
  std::vector<std::vector<int32_t>> out;
  for (const auto& request : requests) {
    const auto result = testing::RunUnary((*cluster)->api(), request, std::chrono::seconds(120));
    EXPECT_TRUE(result.status.ok()) << result.status.error_message() << "\n" << (*cluster)->Logs();
    EXPECT_GE(result.ids().size(), 8u) << "tp " << tp << ": " << result.response.text();
    out.push_back(result.ids());
  }
  return out;
}

TEST(SmolLm2ServingTest, AnswersAChatQuestionWithTheFact) {
  TESSERA_REQUIRE_SMOLLM2();
  testing::ClusterOptions options;
  options.model_dir = testing::SmolLm2Gguf();
  options.log_dir = testing::ScratchDir("chat");
  options.kv_memory_mb = 64;
  auto cluster = testing::Cluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status().message();
  const auto result = testing::RunUnary((*cluster)->api(), GreedyChat("What is the capital of France?", 96),
                                        std::chrono::seconds(120));
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_NE(result.response.text().find("Paris"), std::string::npos) << result.response.text();
  EXPECT_EQ(result.response.finish_reason(), v1::FINISH_REASON_EOS) << "the model ends its turn (<|im_end|>): "
                                                                     << result.response.text();
}

TEST(SmolLm2ServingTest, TensorParallel3GivesTheGreedyTokensOfTp1) {
  TESSERA_REQUIRE_SMOLLM2();
  const auto tp1 = GreedyIdsAtTp(1);
  const auto tp3 = GreedyIdsAtTp(3);
  ASSERT_EQ(tp1.size(), 4u);
  ASSERT_EQ(tp3.size(), 4u);
  for (size_t i = 0; i < tp1.size(); ++i) EXPECT_EQ(tp1[i], tp3[i]) << "prompt " << i;
}

TEST(SmolLm2ServingTest, ATpThatCannotShardNineHeadsIsRefusedAtStartup) {
  TESSERA_REQUIRE_SMOLLM2();
  const auto started = std::chrono::steady_clock::now();
  const auto result = testing::RunCommand(
      testing::TesseraBinary() + " serve --model " + testing::SmolLm2Gguf().string() +
      " --tp 2 --port 0 --http-port 0 --insecure 2>&1");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_LT(seconds, 30.0) << "refused at startup, not after retries";
  EXPECT_NE(result.output.find("tp=2 does not divide num_attention_heads=9"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("tp that would work: 1, 3, 9"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace tessera
