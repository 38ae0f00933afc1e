#include "benchmarks/roofline/decode_traffic.h"

#include "gtest/gtest.h"

namespace tessera::bench {
namespace {

ModelConfig SmallConfig() {
  ModelConfig c;
  c.hidden_size = 64;
  c.intermediate_size = 160;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.num_hidden_layers = 3;
  c.vocab_size = 100;
  c.max_position_embeddings = 256;
  return c;
}

TEST(DecodeTrafficTest, CountsEveryMatrixOnceAndKvPerSequence) {
  const ModelConfig c = SmallConfig();
  auto layout = ShardLayout::Make(c, 0, 1);
  ASSERT_TRUE(layout.ok()) << layout.status();
  const DecodeTraffic t = ComputeDecodeTraffic(c, *layout, DType::kBF16, /*batch=*/4, /*context=*/10);
  // Per layer: qkv (8 + 2*2) * 8 x 64, o 64 x 64, gate_up 320 x 64, down 64 x 160.
  const uint64_t per_layer = 96 * 64 + 64 * 64 + 320 * 64 + 64 * 160;
  EXPECT_EQ(t.layer_matrix_bytes, 3 * per_layer * 2);
  EXPECT_EQ(t.norm_bytes, (2 * 3 + 1) * 64 * 4u);
  EXPECT_EQ(t.lm_head_bytes, 100 * 64 * 2u);
  EXPECT_EQ(t.embedding_row_bytes, 4 * 64 * 2u);
  // 4 sequences x 10 tokens x 3 layers x (K and V) x 2 kv heads x 8 dims x float.
  EXPECT_EQ(t.kv_read_bytes, 4u * 10 * 3 * 2 * 2 * 8 * 4);
  EXPECT_EQ(t.kv_write_bytes, 4u * 3 * 2 * 2 * 8 * 4);
  EXPECT_EQ(t.total(), t.weight_bytes() + t.embedding_row_bytes + t.kv_read_bytes + t.kv_write_bytes);
}

TEST(DecodeTrafficTest, TensorParallelRankReadsItsShare) {
  const ModelConfig c = SmallConfig();
  auto full = ShardLayout::Make(c, 0, 1);
  auto half = ShardLayout::Make(c, 0, 2);
  ASSERT_TRUE(full.ok() && half.ok());
  const DecodeTraffic a = ComputeDecodeTraffic(c, *full, DType::kF32, 1, 16);
  const DecodeTraffic b = ComputeDecodeTraffic(c, *half, DType::kF32, 1, 16);
  EXPECT_EQ(b.layer_matrix_bytes * 2, a.layer_matrix_bytes);
  EXPECT_EQ(b.kv_read_bytes * 2, a.kv_read_bytes);
  EXPECT_EQ(b.lm_head_bytes * 2, a.lm_head_bytes);
}

}  // namespace
}  // namespace tessera::bench
