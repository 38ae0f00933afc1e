// The worker's host KV tier on the CPU backend: a block saved to a slot and loaded into
// another block arrives whole (values and FP8 scales, every layer, K and V), and nothing
// else moves.
#include "worker/host_kv_tier.h"

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "worker/kv_cache.h"

namespace tessera {
namespace {

constexpr int kLayers = 3;

class HostKvTierTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    backend_ = kernels::MakeCpuBackend(1);
    kernels::KvCacheShape shape;
    shape.num_blocks = 6;
    shape.block_size = 4;
    shape.num_kv_heads = 2;
    shape.head_dim = 8;
    shape.dtype = GetParam();
    auto cache = KvCache::Create(backend_.get(), kLayers, shape);
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = std::move(*cache);
    std::mt19937 rng(7);
    for (int l = 0; l < kLayers; ++l) {
      for (void* base : {cache_->k(l), cache_->v(l)}) {
        auto* bytes = static_cast<uint8_t*>(base);
        for (size_t i = 0; i < shape.bytes(); ++i) bytes[i] = static_cast<uint8_t>(rng());
      }
    }
  }

  // Every byte of `block` in every layer's K and V, values then scales.
  std::vector<uint8_t> BlockBytes(int block) const {
    const kernels::KvCacheShape& s = cache_->shape();
    const size_t rows = static_cast<size_t>(s.block_size) * s.num_kv_heads;
    const size_t value_bytes = rows * s.head_dim * DTypeSize(s.dtype);
    const size_t scale_bytes = rows * KvScaleBytes(s.dtype);
    std::vector<uint8_t> out;
    for (int l = 0; l < kLayers; ++l) {
      for (const void* base : {cache_->k(l), cache_->v(l)}) {
        const auto* bytes = static_cast<const uint8_t*>(base);
        out.insert(out.end(), bytes + block * value_bytes, bytes + (block + 1) * value_bytes);
        const uint8_t* scales = bytes + s.scales_offset();
        out.insert(out.end(), scales + block * scale_bytes, scales + (block + 1) * scale_bytes);
      }
    }
    return out;
  }

  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<KvCache> cache_;
};

TEST_P(HostKvTierTest, ABlockSavedAndLoadedElsewhereArrivesWholeAndAlone) {
  auto tier = HostKvTier::Create(backend_.get(), *cache_, /*num_slots=*/2);
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_EQ((*tier)->bytes(), 2 * BlockBytes(1).size());
  const std::vector<uint8_t> saved = BlockBytes(3);
  const std::vector<uint8_t> neighbour_before = BlockBytes(4);
  ASSERT_TRUE((*tier)->Save(*cache_, 3, 1).ok());
  ASSERT_TRUE((*tier)->Load(1, *cache_, 5).ok());
  EXPECT_EQ(BlockBytes(5), saved);
  EXPECT_EQ(BlockBytes(3), saved);
  EXPECT_EQ(BlockBytes(4), neighbour_before);
}

TEST_P(HostKvTierTest, RefusesBlocksAndSlotsOutOfRange) {
  auto tier = HostKvTier::Create(backend_.get(), *cache_, 2);
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_EQ((*tier)->Save(*cache_, 6, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*tier)->Save(*cache_, 0, 0).code(), absl::StatusCode::kInvalidArgument) << "block 0 is reserved";
  EXPECT_EQ((*tier)->Load(2, *cache_, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HostKvTier::Create(backend_.get(), *cache_, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, HostKvTierTest, ::testing::Values(DType::kF32, DType::kBF16, DType::kF8E4M3),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

}  // namespace
}  // namespace tessera
