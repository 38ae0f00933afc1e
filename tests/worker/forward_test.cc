// The forward pass on stories260K against llama2.c's reference output.
#include <cmath>

#include "gtest/gtest.h"
#include "tests/support/test_model.h"
#include "tests/worker/test_expected.h"
#include "worker/communicator.h"
#include "worker/llama_model.h"
#include "worker/single_sequence.h"

namespace tessera {
namespace {

class ForwardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TESSERA_REQUIRE_STORIES_MODEL();
    expected_ = testing::LoadExpected();
    backend_ = kernels::MakeCpuBackend(2);
    auto model = LlamaModel::Load(testing::StoriesModelDir(), backend_.get(), &comm_);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
  }

  std::unique_ptr<KvCache> Cache(int blocks = 12) {
    auto cache = model_->CreateKvCache(blocks, 16);
    EXPECT_TRUE(cache.ok()) << cache.status();
    return std::move(*cache);
  }

  SingleSequenceOptions Greedy(int n) {
    SingleSequenceOptions o;
    o.max_new_tokens = n;
    o.sampling.temperature = 0;
    o.ignore_eos = true;
    return o;
  }

  testing::Expected expected_;
  std::unique_ptr<kernels::Backend> backend_;
  SingleRankCommunicator comm_;
  std::unique_ptr<LlamaModel> model_;
};

TEST_F(ForwardTest, GreedyMatchesReferenceTokenForToken) {
  auto cache = Cache();
  auto result = GenerateSingleSequence(*model_, *cache, expected_.prompt_ids, Greedy(60));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->generated_ids, expected_.generated_ids);
}

TEST_F(ForwardTest, FirstStepLogitsMatchReference) {
  auto cache = Cache();
  auto result = GenerateSingleSequence(*model_, *cache, expected_.prompt_ids, Greedy(1));
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->first_logits.size(), expected_.first_logits.size());
  float worst = 0;
  for (size_t i = 0; i < expected_.first_logits.size(); ++i) {
    worst = std::max(worst, std::abs(result->first_logits[i] - expected_.first_logits[i]));
  }
  EXPECT_LT(worst, 1e-4f);
}

TEST_F(ForwardTest, ChunkedPrefillGivesTheSameTokens) {
  for (int chunk : {1, 2, 3}) {
    auto cache = Cache();
    SingleSequenceOptions o = Greedy(20);
    o.prefill_chunk = chunk;
    auto result = GenerateSingleSequence(*model_, *cache, expected_.prompt_ids, o);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->generated_ids,
              std::vector<int32_t>(expected_.generated_ids.begin(),
                                   expected_.generated_ids.begin() + 20))
        << "prefill chunk " << chunk;
  }
}

// Two sequences in one step, with scattered blocks, see only their own context.
TEST_F(ForwardTest, BatchedSequencesMatchSeparateRuns) {
  auto cache = Cache(16);
  const std::vector<int32_t> a = expected_.prompt_ids;
  std::vector<int32_t> b = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421,
                            395, 317, 426, 338, 401, 396, 267};  // 20 tokens: spans 2 blocks.
  StepBatch batch;
  auto add = [&](const std::vector<int32_t>& tokens, std::vector<int32_t> blocks) {
    for (int pos = 0; pos < static_cast<int>(tokens.size()); ++pos) {
      batch.token_ids.push_back(tokens[pos]);
      batch.positions.push_back(pos);
      batch.slot_mapping.push_back(static_cast<int64_t>(blocks[pos / 16]) * 16 + pos % 16);
    }
    batch.query_start.push_back(batch.num_tokens());
    batch.context_lens.push_back(static_cast<int32_t>(tokens.size()));
    blocks.resize(2, 0);
    batch.block_tables.insert(batch.block_tables.end(), blocks.begin(), blocks.end());
    batch.logits_rows.push_back(batch.num_tokens() - 1);
  };
  batch.query_start.push_back(0);
  batch.max_blocks_per_seq = 2;
  add(a, {7});
  add(b, {3, 11});
  std::vector<float> logits;
  ASSERT_TRUE(model_->Forward(batch, cache.get(), &logits).ok());
  ASSERT_EQ(logits.size(), 2u * 512);

  for (int which = 0; which < 2; ++which) {
    auto alone = Cache();
    const auto& prompt = which == 0 ? a : b;
    auto result = GenerateSingleSequence(*model_, *alone, prompt, Greedy(1));
    ASSERT_TRUE(result.ok());
    for (int v = 0; v < 512; ++v) {
      EXPECT_NEAR(logits[which * 512 + v], result->first_logits[v], 1e-4) << "seq " << which;
    }
  }
}

TEST_F(ForwardTest, RejectsPromptLongerThanTheContext) {
  auto cache = Cache(4);  // 3 usable blocks = 48 tokens.
  std::vector<int32_t> prompt(40, 300);
  auto result = GenerateSingleSequence(*model_, *cache, prompt, Greedy(10));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find("exceeds the context of 48 tokens"), std::string::npos)
      << result.status();
}

TEST_F(ForwardTest, RejectsOutOfRangeTokenIds) {
  auto cache = Cache();
  auto result = GenerateSingleSequence(*model_, *cache, {1, 512}, Greedy(1));
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("token id 512"), std::string::npos) << result.status();
}

TEST_F(ForwardTest, SeededSamplingIsReproducible) {
  SingleSequenceOptions o = Greedy(30);
  o.sampling.temperature = 0.9f;
  o.sampling.top_p = 0.95f;
  o.sampling.seed = 1234;
  auto c1 = Cache();
  auto c2 = Cache();
  auto r1 = GenerateSingleSequence(*model_, *c1, expected_.prompt_ids, o);
  auto r2 = GenerateSingleSequence(*model_, *c2, expected_.prompt_ids, o);
  ASSERT_TRUE(r1.ok() && r2.ok());
  EXPECT_EQ(r1->generated_ids, r2->generated_ids);
  o.sampling.seed = 99;
  auto c3 = Cache();
  auto r3 = GenerateSingleSequence(*model_, *c3, expected_.prompt_ids, o);
  ASSERT_TRUE(r3.ok());
  EXPECT_NE(r1->generated_ids, r3->generated_ids);
}

}  // namespace
}  // namespace tessera
