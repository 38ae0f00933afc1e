#include "common/tensor_parallel.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

ModelConfig Stories() {
  ModelConfig c;
  c.hidden_size = 64;
  c.intermediate_size = 172;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 4;
  c.head_dim = 8;
  c.num_hidden_layers = 5;
  c.vocab_size = 512;
  return c;
}

TEST(EvenSplitTest, CoversEverythingOnce) {
  for (int world : {1, 2, 3, 4, 7}) {
    int64_t next = 0;
    for (int r = 0; r < world; ++r) {
      Range part = EvenSplit(172, r, world);
      EXPECT_EQ(part.begin, next);
      EXPECT_GE(part.size(), 172 / world);
      EXPECT_LE(part.size(), 172 / world + 1);
      next = part.end;
    }
    EXPECT_EQ(next, 172);
  }
}

TEST(ShardLayoutTest, SplitsHeadsAndKvHeads) {
  auto s = ShardLayout::Make(Stories(), 1, 2);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->q_heads, (Range{4, 8}));
  EXPECT_EQ(s->kv_heads, (Range{2, 4}));
  EXPECT_EQ(s->intermediate, (Range{86, 172}));
  EXPECT_EQ(s->vocab, (Range{256, 512}));
}

TEST(ShardLayoutTest, ReplicatesKvHeadsWhenWorldExceedsThem) {
  // 8 query heads, 4 KV heads, 8 ranks: rank r holds query head r, which reads KV head r/2.
  for (int r = 0; r < 8; ++r) {
    auto s = ShardLayout::Make(Stories(), r, 8);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->q_heads, (Range{r, r + 1}));
    EXPECT_EQ(s->kv_heads, (Range{r / 2, r / 2 + 1}));
  }
}

TEST(ShardLayoutTest, RejectsWorldThatDoesNotDivideHeads) {
  auto s = ShardLayout::Make(Stories(), 0, 3);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("num_attention_heads=8"), std::string::npos);
  EXPECT_FALSE(ShardLayout::Make(Stories(), 2, 2).ok());
}

TEST(ShardLayoutTest, ListsTheTensorParallelSizesThatWork) {
  ModelConfig nine_heads = Stories();  // SmolLM2-135M: 9 query heads, 3 KV heads.
  nine_heads.num_attention_heads = 9;
  nine_heads.num_key_value_heads = 3;
  EXPECT_EQ(ValidTensorParallelSizes(nine_heads, false), (std::vector<int>{1, 3, 9}));
  const absl::Status refused = WithValidTensorParallelSizes(
      ShardLayout::Make(nine_heads, 0, 2).status(), nine_heads, false);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("tp=2 does not divide num_attention_heads=9"), std::string::npos)
      << refused;
  EXPECT_NE(refused.message().find("tp that would work: 1, 3, 9"), std::string::npos) << refused;
}

ModelConfig TinyMoe(int experts, int shared = 0) {
  ModelConfig c = Stories();
  c.architecture = "Qwen3MoeForCausalLM";
  c.moe.num_experts = experts;
  c.moe.top_k = 2;
  c.moe.intermediate_size = 30;
  c.moe.shared_intermediate_size = shared;
  return c;
}

TEST(ShardLayoutTest, TensorParallelExpertsSplitEachExpert) {
  auto s = ShardLayout::Make(TinyMoe(8, 20), 1, 4);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->expert_parallel);
  EXPECT_EQ(s->experts, (Range{0, 8}));
  EXPECT_EQ(s->expert_intermediate, EvenSplit(30, 1, 4));
  EXPECT_EQ(s->shared_intermediate, EvenSplit(20, 1, 4));
}

TEST(ShardLayoutTest, ExpertParallelGivesWholeExperts) {
  for (int r = 0; r < 4; ++r) {
    auto s = ShardLayout::Make(TinyMoe(8, 20), r, 4, /*expert_parallel=*/true);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_TRUE(s->expert_parallel);
    EXPECT_EQ(s->experts, (Range{2 * r, 2 * r + 2}));
    EXPECT_EQ(s->expert_intermediate, (Range{0, 30}));
    EXPECT_EQ(s->shared_intermediate, EvenSplit(20, r, 4));  // The shared expert still splits.
    EXPECT_EQ(s->q_heads, (Range{2 * r, 2 * r + 2}));          // Attention stays split.
  }
}

TEST(ShardLayoutTest, UnevenExpertParallelismIsRefusedWithTheNumbers) {
  auto s = ShardLayout::Make(TinyMoe(6), 0, 4, /*expert_parallel=*/true);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("6 experts would leave 2 over"), std::string::npos)
      << s.status();
}

TEST(ShardLayoutTest, ExpertParallelismOnADenseModelIsRefused) {
  auto s = ShardLayout::Make(Stories(), 0, 2, /*expert_parallel=*/true);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("dense"), std::string::npos) << s.status();
}

}  // namespace
}  // namespace tessera
