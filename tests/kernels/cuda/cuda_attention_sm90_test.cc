// The sm_90 prefill path of the CUDA backend (FlashInfer's FA3-style kernel scheduled by
// Backend::PlanAttention) against the CPU backend on the same BF16 inputs and cache bytes:
// BF16 caches and FP8 ones (dequantized into a compact BF16 copy of the step's pages; one
// more rounding of K and V to BF16, 2^-9 relative, well inside kBf16AttentionTolerance),
// head sizes 64 and 128, GQA groups 1, 4 and 8, block sizes 1, 16 and 32, sliding windows,
// prompts of several query tiles, chunks after a cached prefix, and mixed steps whose leading
// decode sequences take the split-KV kernel. Also: a CUDA graph captured for one step and
// replayed for another of the same shape reads the second step's plan. Runs on Hopper only
// (compute capability 9.0); skips elsewhere, and without a device.
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace tessera::kernels::cuda_testing {
namespace {

struct Seq {
  int num_new;
  int context_len;
};

// One step over a paged BF16 cache whose blocks come from a shuffled free list.
struct Step {
  KvCacheShape shape;
  int q_heads = 0;
  int num_tokens = 0;
  int max_blocks = 0;
  int q_stride = 0;
  std::vector<int32_t> query_start{0};
  std::vector<int32_t> context_lens;
  std::vector<int32_t> block_tables;
  std::vector<float> q;          // BF16-rounded.
  std::vector<uint8_t> k_cache;  // BF16 or FP8 bytes, written by the CPU backend.
  std::vector<uint8_t> v_cache;
  int leading_decode = 0;

  AttentionBatch Host(int window) const {
    AttentionBatch b;
    b.num_seqs = static_cast<int>(context_lens.size());
    b.num_tokens = num_tokens;
    b.query_start = query_start.data();
    b.context_lens = context_lens.data();
    b.block_tables = block_tables.data();
    b.max_blocks_per_seq = max_blocks;
    b.sliding_window = window;
    b.num_decode_seqs = leading_decode;
    return b;
  }
};

Step MakeStep(Backend& cpu, const std::vector<Seq>& seqs, int head_dim, int block_size, int q_heads,
              int kv_heads, int max_blocks, int num_blocks, uint32_t seed,
              DType cache_dtype = DType::kBF16) {
  Step s;
  s.q_heads = q_heads;
  s.max_blocks = max_blocks;
  s.shape = KvCacheShape{num_blocks, block_size, kv_heads, head_dim, cache_dtype};
  std::vector<int32_t> free_blocks(num_blocks - 1);
  std::iota(free_blocks.begin(), free_blocks.end(), 1);  // Block 0 stays the null block.
  std::mt19937 rng(seed);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
  size_t next = 0;
  s.block_tables.assign(seqs.size() * max_blocks, 0);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int blocks = (seqs[i].context_len + block_size - 1) / block_size;
    for (int b = 0; b < blocks; ++b) s.block_tables[i * max_blocks + b] = free_blocks[next++];
    s.context_lens.push_back(seqs[i].context_len);
    s.query_start.push_back(s.query_start.back() + seqs[i].num_new);
  }
  while (s.leading_decode < static_cast<int>(seqs.size()) && seqs[s.leading_decode].num_new == 1) {
    ++s.leading_decode;
  }
  s.num_tokens = s.query_start.back();
  s.q_stride = (q_heads + 2 * kv_heads) * head_dim;  // Queries lead fused qkv rows.
  s.q = RoundedToBf16(
      RandomFloats(static_cast<size_t>(s.num_tokens) * s.q_stride, seed + 1, -2.0f, 2.0f));
  const std::vector<float> k = RandomFloats(s.shape.elements(), seed + 2);
  const std::vector<float> v = RandomFloats(s.shape.elements(), seed + 3);
  std::vector<int64_t> all_slots(static_cast<size_t>(num_blocks) * block_size);
  std::iota(all_slots.begin(), all_slots.end(), 0);
  s.k_cache.assign(s.shape.bytes(), 0);
  s.v_cache.assign(s.shape.bytes(), 0);
  cpu.WriteKvCache(k.data(), v.data(), kv_heads * head_dim, all_slots.data(),
                   static_cast<int>(all_slots.size()), s.shape, s.k_cache.data(), s.v_cache.data());
  return s;
}

std::vector<float> Expected(Backend& cpu, const Step& s, int window, float scale) {
  std::vector<float> out(static_cast<size_t>(s.num_tokens) * s.q_heads * s.shape.head_dim);
  cpu.PagedAttention(s.q.data(), s.q_stride, s.Host(window), s.k_cache.data(), s.v_cache.data(),
                     s.shape, s.q_heads, scale, out.data());
  return out;
}

// Device copies of a step's metadata and inputs.
struct DeviceStep {
  explicit DeviceStep(const Step& s)
      : query_start(s.query_start),
        context_lens(s.context_lens),
        block_tables(s.block_tables),
        q(Bf16Bits(s.q)),
        k_cache(s.k_cache),
        v_cache(s.v_cache),
        out(static_cast<size_t>(s.num_tokens) * s.q_heads * s.shape.head_dim) {}
  AttentionBatch Batch(const Step& s, int window) const {
    AttentionBatch b = s.Host(window);
    b.query_start = query_start.get();
    b.context_lens = context_lens.get();
    b.block_tables = block_tables.get();
    return b;
  }
  DeviceArray<int32_t> query_start, context_lens, block_tables;
  DeviceArray<uint16_t> q;
  DeviceArray<uint8_t> k_cache, v_cache;
  DeviceArray<uint16_t> out;
};

class CudaSm90AttentionTest : public CudaBf16VsCpuTest {
 protected:
  void SetUp() override {
    CudaBf16VsCpuTest::SetUp();
    if (IsSkipped() || cuda_ == nullptr) return;
    if (!cuda_->sm90_prefill_available()) {
      GTEST_SKIP() << "the sm_90 prefill needs compute capability 9.0 and a build with the "
                      "FlashInfer headers (scripts/fetch_attention_headers.sh)";
    }
  }
};

TEST_F(CudaSm90AttentionTest, MatchesCpuAcrossShapes) {
  // Two decode rows first (split-KV kernel), then prompts of several tiles, a chunk after a
  // long cached prefix, a short prompt and a one-token chunk after a prefix.
  const std::vector<Seq> seqs = {{1, 300}, {1, 45},    {700, 700}, {200, 1500},
                                 {5, 5},   {130, 400}, {1, 1},     {64, 64}};
  for (DType cache : {DType::kBF16, DType::kF8E4M3}) {
    for (int head_dim : {64, 128}) {
      for (int block_size : {1, 16, 32}) {
        for (auto [q_heads, kv_heads] : std::vector<std::pair<int, int>>{{4, 4}, {8, 2}, {16, 2}}) {
          for (int window : {0, 100}) {
            const std::string what =
                absl::StrCat(DTypeName(cache), " head_dim=", head_dim, " block_size=", block_size,
                             " q_heads=", q_heads, " kv_heads=", kv_heads, " window=", window);
            SCOPED_TRACE(what);
            const int max_blocks = 1500 / block_size + 2;
            const int num_blocks = 4000 / block_size + 8;
            const Step s =
                MakeStep(*cpu_, seqs, head_dim, block_size, q_heads, kv_heads, max_blocks,
                         num_blocks, 900 + head_dim + block_size + window, cache);
            const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
            const std::vector<float> expected = Expected(*cpu_, s, window, scale);
            DeviceStep d(s);
            const int64_t launches = cuda_->sm90_prefill_launches();
            cuda_->PlanAttention(s.Host(window), s.shape, q_heads);
            cuda_->PagedAttention(d.q.get(), s.q_stride, d.Batch(s, window), d.k_cache.get(),
                                  d.v_cache.get(), s.shape, q_heads, scale, d.out.get());
            cuda_->Synchronize();
            ASSERT_TRUE(cuda_->status().ok()) << cuda_->status();
            EXPECT_EQ(cuda_->sm90_prefill_launches(), launches + 1) << "took another kernel";
            ExpectAllClose(Bf16Values(d.out.ToHost()), expected, kBf16AttentionTolerance, what);
          }
        }
      }
    }
  }
}

// Without a plan for the call's batch the backend keeps the tensor-core kernel.
TEST_F(CudaSm90AttentionTest, UnplannedBatchesTakeTheTensorCoreKernel) {
  const Step s = MakeStep(*cpu_, {{300, 300}, {40, 90}}, 128, 16, 8, 2, 24, 64, 7);
  const float scale = 1.0f / std::sqrt(128.0f);
  const std::vector<float> expected = Expected(*cpu_, s, 0, scale);
  DeviceStep d(s);
  const int64_t launches = cuda_->sm90_prefill_launches();
  const Step other = MakeStep(*cpu_, {{10, 10}}, 128, 16, 8, 2, 24, 64, 8);
  cuda_->PlanAttention(other.Host(0), other.shape, 8);  // A plan for one sequence, not two.
  cuda_->PagedAttention(d.q.get(), s.q_stride, d.Batch(s, 0), d.k_cache.get(), d.v_cache.get(),
                        s.shape, 8, scale, d.out.get());
  cuda_->Synchronize();
  ASSERT_TRUE(cuda_->status().ok()) << cuda_->status();
  EXPECT_EQ(cuda_->sm90_prefill_launches(), launches);
  ExpectAllClose(Bf16Values(d.out.ToHost()), expected, kBf16AttentionTolerance, "tc");
}

// The worker replays a step's graph for later steps of the same padded shape with other
// lengths: the kernel must read the plan of the step being replayed.
TEST_F(CudaSm90AttentionTest, GraphReplayReadsTheNewStepsPlan) {
  const int head_dim = 128, q_heads = 8, kv_heads = 2, block_size = 16;
  const int max_blocks = 80, num_blocks = 200;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  // Same token and sequence counts (the padded shape), different splits and prefixes.
  const Step a = MakeStep(*cpu_, {{1, 50}, {500, 500}, {12, 12}}, head_dim, block_size, q_heads,
                          kv_heads, max_blocks, num_blocks, 21);
  const Step b = MakeStep(*cpu_, {{1, 900}, {256, 1200}, {256, 256}}, head_dim, block_size, q_heads,
                          kv_heads, max_blocks, num_blocks, 22);
  ASSERT_EQ(a.num_tokens, b.num_tokens);
  // One set of device buffers, as the worker's workspace: b's data is copied over a's.
  DeviceStep d(a);
  cuda_->PlanAttention(a.Host(0), a.shape, q_heads);
  cuda_->PagedAttention(d.q.get(), a.q_stride, d.Batch(a, 0), d.k_cache.get(), d.v_cache.get(),
                        a.shape, q_heads, scale, d.out.get());  // Grows scratch eagerly.
  ASSERT_TRUE(cuda_->BeginCapture());
  cuda_->PagedAttention(d.q.get(), a.q_stride, d.Batch(a, 0), d.k_cache.get(), d.v_cache.get(),
                        a.shape, q_heads, scale, d.out.get());
  const int graph = cuda_->EndCapture();
  ASSERT_GE(graph, 0) << cuda_->status();

  cuda_->CopyToDevice(d.query_start.get(), b.query_start.data(), b.query_start.size() * 4);
  cuda_->CopyToDevice(d.context_lens.get(), b.context_lens.data(), b.context_lens.size() * 4);
  cuda_->CopyToDevice(d.block_tables.get(), b.block_tables.data(), b.block_tables.size() * 4);
  const std::vector<uint16_t> q_bits = Bf16Bits(b.q);
  cuda_->CopyToDevice(d.q.get(), q_bits.data(), q_bits.size() * 2);
  cuda_->CopyToDevice(d.k_cache.get(), b.k_cache.data(), b.k_cache.size());
  cuda_->CopyToDevice(d.v_cache.get(), b.v_cache.data(), b.v_cache.size());
  const int64_t launches = cuda_->sm90_prefill_launches();
  cuda_->PlanAttention(b.Host(0), b.shape, q_heads);
  cuda_->LaunchGraph(graph);
  cuda_->Synchronize();
  ASSERT_TRUE(cuda_->status().ok()) << cuda_->status();
  EXPECT_EQ(cuda_->sm90_prefill_launches(), launches) << "the replay launched nothing new";
  ExpectAllClose(Bf16Values(d.out.ToHost()), Expected(*cpu_, b, 0, scale), kBf16AttentionTolerance,
                 "replayed with b's plan");
}

}  // namespace
}  // namespace tessera::kernels::cuda_testing
