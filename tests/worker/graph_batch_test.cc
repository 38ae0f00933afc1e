// Graph padding (worker/graph_batch.h): the shapes steps pad to, and that a padded step
// gives its real rows the unpadded step's logits. The padded batches run eagerly on the
// CPU backend here; on CUDA the same batches are what the captured graphs replay.
#include "worker/graph_batch.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/test_model.h"
#include "tests/worker/step_scenarios.h"
#include "worker/communicator.h"
#include "worker/llama_model.h"

namespace tessera {
namespace {

constexpr int kBlockSize = 16;

GraphLimits Limits(int width = 32) {
  GraphLimits limits;
  limits.width = width;
  limits.block_size = kBlockSize;
  return limits;
}

// `seqs` one-token sequences, each wanting its logits.
StepBatch Decode(int seqs) {
  StepBatch b;
  b.max_blocks_per_seq = 2;
  std::vector<int32_t> tokens(20, 7), blocks = {1, 2};
  for (int s = 0; s < seqs; ++s) b.AddSequence(tokens, blocks, 19, 20, kBlockSize, true);
  return b;
}

TEST(GraphShapeTest, DecodeBatchesTakeTheDecodeSizes) {
  for (auto [seqs, size] : std::vector<std::pair<int, int>>{
           {1, 1}, {3, 4}, {17, 24}, {33, 48}, {200, 256}}) {
    const auto shape = GraphShapeFor(Decode(seqs), Limits());
    ASSERT_TRUE(shape.has_value()) << seqs;
    EXPECT_EQ(shape->decode_seqs, size);
    EXPECT_EQ(shape->seqs, size);
    EXPECT_EQ(shape->tokens, size);
    EXPECT_EQ(shape->logits, size);
    EXPECT_TRUE(shape->pure_decode());
  }
  EXPECT_FALSE(GraphShapeFor(Decode(257), Limits()).has_value());
}

TEST(GraphShapeTest, MixedStepsPadSequencesAndTokens) {
  StepBatch b = Decode(2);
  std::vector<int32_t> prompt(37, 5), blocks = {3, 4, 5};
  b.AddSequence(prompt, blocks, 0, 37, kBlockSize, true);
  const auto shape = GraphShapeFor(b, Limits());
  ASSERT_TRUE(shape.has_value());
  EXPECT_EQ(shape->decode_seqs, 2);
  EXPECT_EQ(shape->seqs, 4);            // 1 prompt + a padding sequence -> 2.
  EXPECT_EQ(shape->tokens, 2 + 48);     // 37 + 1 padding token, to a multiple of 16.
  EXPECT_EQ(shape->logits, 16);         // 3 rows, to a multiple of 16.
  EXPECT_EQ(StepKindOf(b), "mixed");

  // Above 1,024 tokens, multiples of 256; past the limit, no graph.
  StepBatch big;
  big.max_blocks_per_seq = 80;
  std::vector<int32_t> long_prompt(1100, 5), many(80);
  std::iota(many.begin(), many.end(), 1);
  big.AddSequence(long_prompt, many, 0, 1100, kBlockSize, true);
  EXPECT_EQ(StepKindOf(big), "prefill");
  auto big_shape = GraphShapeFor(big, Limits(80));
  ASSERT_TRUE(big_shape.has_value());
  EXPECT_EQ(big_shape->tokens, 1280);
  GraphLimits small = Limits(80);
  small.max_tokens = 1024;
  EXPECT_FALSE(GraphShapeFor(big, small).has_value());
  // A block table wider than the graphs' cannot be padded into them.
  EXPECT_FALSE(GraphShapeFor(big, Limits(40)).has_value());
}

TEST(GraphShapeTest, SameShapeForStepsThatDifferOnlyInContent) {
  StepBatch a = Decode(5), b = Decode(6);
  std::vector<int32_t> prompt(40, 5), blocks = {3, 4, 5};
  a.AddSequence(prompt, blocks, 0, 30, kBlockSize, true);
  b.AddSequence(prompt, blocks, 8, 38, kBlockSize, false);
  EXPECT_EQ(*GraphShapeFor(a, Limits()), *GraphShapeFor(b, Limits()));
}

TEST(GraphShapeTest, PaddingTokensWriteNoKvAndRealRowsKeepTheirOrder) {
  StepBatch b = Decode(3);
  std::vector<int32_t> prompt(20, 5), blocks = {3, 4};
  b.AddSequence(prompt, blocks, 0, 20, kBlockSize, true);
  const GraphShape shape = *GraphShapeFor(b, Limits());
  const StepBatch p = PadToGraphShape(b, shape, 32);
  ASSERT_EQ(p.num_tokens(), shape.tokens);
  ASSERT_EQ(p.num_seqs(), shape.seqs);
  ASSERT_EQ(static_cast<int>(p.logits_rows.size()), shape.logits);
  EXPECT_EQ(p.max_blocks_per_seq, 32);
  // Decode rows 0..2 stay; the prompt's last token moves past the padding decode sequence.
  EXPECT_EQ(p.logits_rows[0], 0);
  EXPECT_EQ(p.logits_rows[2], 2);
  EXPECT_EQ(p.logits_rows[3], 4 + 19);
  EXPECT_EQ(p.token_ids[4 + 19], 5);
  for (int t = 0; t < p.num_tokens(); ++t) {
    const bool real = t < 3 || (t >= 4 && t < 24);
    EXPECT_EQ(p.slot_mapping[t] >= 0, real) << t;
  }
  for (int s = 0; s < p.num_seqs(); ++s) {
    const int q = p.query_start[s + 1] - p.query_start[s];
    EXPECT_GE(q, 1);
    EXPECT_GE(p.context_lens[s], q);
  }
}

// The padded step through the real model: its first rows are the unpadded step's logits.
class PaddedForwardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TESSERA_REQUIRE_STORIES_MODEL();
    backend_ = kernels::MakeCpuBackend(2);
    auto model = LlamaModel::Load(testing::StoriesModelDir(), backend_.get(), &comm_);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    for (auto* cache : {&plain_, &padded_}) {
      auto c = model_->CreateKvCache(kBlocks, kBlockSize);
      ASSERT_TRUE(c.ok()) << c.status();
      *cache = std::move(*c);
    }
  }

  // Runs `b` plainly on one cache and padded on the other; compares the real rows.
  void Check(const StepBatch& b, const std::string& what) {
    SCOPED_TRACE(what);
    const auto shape = GraphShapeFor(b, Limits(kBlocks));
    ASSERT_TRUE(shape.has_value());
    const StepBatch p = PadToGraphShape(b, *shape, kBlocks);
    std::vector<float> want, got;
    ASSERT_TRUE(model_->Forward(b, plain_.get(), &want).ok());
    const absl::Status s = model_->Forward(p, padded_.get(), &got);
    ASSERT_TRUE(s.ok()) << s;
    const size_t vocab = model_->config().vocab_size;
    ASSERT_EQ(got.size(), static_cast<size_t>(shape->logits) * vocab);
    ASSERT_EQ(want.size(), b.logits_rows.size() * vocab);
    const testing::RowComparison c = testing::CompareRows(want, got, b.logits_rows.size(), vocab);
    EXPECT_LT(c.worst, 1e-4f);
    EXPECT_TRUE(c.same_argmax);
  }

  static constexpr int kBlocks = 32;  // stories260K: 512 positions = 32 blocks.
  std::unique_ptr<kernels::Backend> backend_;
  SingleRankCommunicator comm_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<KvCache> plain_, padded_;
};

// Every kind of step, then the decode step reads the K/V the padded steps wrote.
TEST_F(PaddedForwardTest, RealRowsMatchTheUnpaddedStep) {
  for (const auto& [what, step] : testing::FourStepScenario()) Check(step, what);
}

}  // namespace
}  // namespace tessera
