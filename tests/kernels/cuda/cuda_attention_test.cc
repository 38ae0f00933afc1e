// Paged attention of the CUDA backend (split-K decode kernel, tiled prefill kernel) against
// the CPU backend, with shuffled block tables, GQA (6 query heads over 2 KV heads, and
// groups of 2, 4 and 8 that the split-K kernel serves several heads per block), block
// sizes 1 and 16, contexts up to 97 tokens, and mixed steps whose leading decode sequences
// take the split-K kernel and the rest the tiled one; both split-K versions, and the
// split-KV plan on long (4,100-token) and mixed 64-sequence decode batches.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cuda/launchers.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace tessera::kernels::cuda_testing {
namespace {

constexpr int kQHeads = 6;  // Defaults: a GQA group of 3, one head per split-K block.
constexpr int kKvHeads = 2;

struct SeqSpec {
  int context_len;  // Tokens in the cache after the step.
  int num_new;      // Of which computed in this step (the last ones).
};

// The host side of an AttentionBatch plus the caches and queries for it.
struct Problem {
  KvCacheShape shape;
  int q_heads = kQHeads;
  int kv_heads = kKvHeads;
  int num_seqs = 0;
  int num_tokens = 0;
  int max_blocks = 0;
  int q_stride = 0;
  std::vector<int32_t> query_start;
  std::vector<int32_t> context_lens;
  std::vector<int32_t> block_tables;
  std::vector<int64_t> slots;
  std::vector<float> q;
  std::vector<float> k_cache;
  std::vector<float> v_cache;
};

// Blocks are handed out from a shuffled list (block 0 stays unused, as in the real pool), so
// a kernel that assumes contiguous blocks reads the wrong keys. The block table is at
// least `min_table_blocks` wide (the worker's tables are as wide as the longest context
// allowed, not the step's longest).
Problem MakeProblem(const std::vector<SeqSpec>& seqs, int block_size, int head_dim,
                    uint32_t seed, int q_heads = kQHeads, int kv_heads = kKvHeads,
                    int min_table_blocks = 0) {
  Problem p;
  p.q_heads = q_heads;
  p.kv_heads = kv_heads;
  p.num_seqs = static_cast<int>(seqs.size());
  int total_blocks = 0;
  for (const SeqSpec& s : seqs) {
    const int blocks = (s.context_len + block_size - 1) / block_size;
    total_blocks += blocks;
    p.max_blocks = std::max(p.max_blocks, blocks + 1);  // One spare column, as tables are.
  }
  p.max_blocks = std::max(p.max_blocks, min_table_blocks);
  p.shape.num_blocks = total_blocks + 5;
  p.shape.block_size = block_size;
  p.shape.num_kv_heads = kv_heads;
  p.shape.head_dim = head_dim;

  std::vector<int32_t> free_blocks(p.shape.num_blocks - 1);
  std::iota(free_blocks.begin(), free_blocks.end(), 1);
  std::mt19937 rng(seed);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
  size_t next_block = 0;

  p.block_tables.assign(static_cast<size_t>(p.num_seqs) * p.max_blocks, 0);
  p.query_start.push_back(0);
  for (int s = 0; s < p.num_seqs; ++s) {
    const SeqSpec& spec = seqs[s];
    const int blocks = (spec.context_len + block_size - 1) / block_size;
    for (int b = 0; b < blocks; ++b) {
      p.block_tables[static_cast<size_t>(s) * p.max_blocks + b] = free_blocks[next_block++];
    }
    p.context_lens.push_back(spec.context_len);
    p.query_start.push_back(p.query_start.back() + spec.num_new);
    for (int j = 0; j < spec.num_new; ++j) {
      const int pos = spec.context_len - spec.num_new + j;
      p.slots.push_back(
          static_cast<int64_t>(p.block_tables[static_cast<size_t>(s) * p.max_blocks +
                                              pos / block_size]) * block_size +
          pos % block_size);
    }
  }
  p.num_tokens = p.query_start.back();
  // Queries sit at the front of fused qkv rows, as in the forward pass.
  p.q_stride = (q_heads + 2 * kv_heads) * head_dim;
  p.q = RandomFloats(static_cast<size_t>(p.num_tokens) * p.q_stride, seed + 1, -2.0f, 2.0f);
  p.k_cache = RandomFloats(p.shape.elements(), seed + 2);
  p.v_cache = RandomFloats(p.shape.elements(), seed + 3);
  return p;
}

// The problem's float caches written by the CPU backend into p.shape.dtype: the bytes both
// backends then read.
std::pair<std::vector<uint8_t>, std::vector<uint8_t>> CacheBytes(Backend& cpu, const Problem& p) {
  std::vector<int64_t> all_slots(p.shape.rows() / p.shape.num_kv_heads);
  for (size_t i = 0; i < all_slots.size(); ++i) all_slots[i] = static_cast<int64_t>(i);
  std::vector<uint8_t> k_cache(p.shape.bytes(), 0), v_cache(p.shape.bytes(), 0);
  cpu.WriteKvCache(p.k_cache.data(), p.v_cache.data(), p.shape.num_kv_heads * p.shape.head_dim,
                   all_slots.data(), static_cast<int>(all_slots.size()), p.shape,
                   k_cache.data(), v_cache.data());
  return {std::move(k_cache), std::move(v_cache)};
}

// Where the previous split-K kernel is still compiled (launchers.h, SplitKernelVersion).
bool SplitV1Kept(const KvCacheShape& shape, gpu::SplitKernelVersion version) {
  return version == gpu::SplitKernelVersion::kV2 || gpu::SplitV1Supported(shape);
}

AttentionBatch HostBatch(const Problem& p) {
  AttentionBatch b;
  b.num_seqs = p.num_seqs;
  b.num_tokens = p.num_tokens;
  b.query_start = p.query_start.data();
  b.context_lens = p.context_lens.data();
  b.block_tables = p.block_tables.data();
  b.max_blocks_per_seq = p.max_blocks;
  b.slot_mapping = p.slots.data();
  return b;
}

// The CPU backend's attention over `p` with the given cache bytes: what every kernel is
// compared with.
std::vector<float> CpuAttention(Backend& cpu, const Problem& p, const std::vector<uint8_t>& k_cache,
                                const std::vector<uint8_t>& v_cache, int window, float scale) {
  std::vector<float> out(static_cast<size_t>(p.num_tokens) * p.q_heads * p.shape.head_dim);
  AttentionBatch batch = HostBatch(p);
  batch.sliding_window = window;
  cpu.PagedAttention(p.q.data(), p.q_stride, batch, k_cache.data(), v_cache.data(), p.shape,
                     p.q_heads, scale, out.data());
  return out;
}

// Device copies of a Problem.
struct DeviceProblem {
  explicit DeviceProblem(const Problem& p)
      : query_start(p.query_start),
        context_lens(p.context_lens),
        block_tables(p.block_tables),
        slots(p.slots),
        q(p.q),
        k_cache(p.k_cache),
        v_cache(p.v_cache),
        out(static_cast<size_t>(p.num_tokens) * p.q_heads * p.shape.head_dim) {
    batch.num_seqs = p.num_seqs;
    batch.num_tokens = p.num_tokens;
    batch.query_start = query_start.get();
    batch.context_lens = context_lens.get();
    batch.block_tables = block_tables.get();
    batch.max_blocks_per_seq = p.max_blocks;
    batch.slot_mapping = slots.get();
  }
  DeviceArray<int32_t> query_start, context_lens, block_tables;
  DeviceArray<int64_t> slots;
  DeviceArray<float> q, k_cache, v_cache, out;
  AttentionBatch batch;
};

class CudaAttentionTest : public CudaVsCpuTest {
 protected:
  // Runs the CPU reference, the backend's choice of kernel, and both kernels explicitly
  // (the split kernel also with small partitions, so the reduction kernel runs).
  // `window` > 0: sliding-window attention (AttentionBatch::sliding_window).
  // The backend is told how many leading sequences decode (AttentionBatch::num_decode_seqs),
  // as the forward pass tells it.
  void CheckAllKernels(const std::vector<SeqSpec>& seqs, const std::string& label,
                       int window = 0, int q_heads = kQHeads, int kv_heads = kKvHeads) {
    int leading_decode = 0;
    while (leading_decode < static_cast<int>(seqs.size()) && seqs[leading_decode].num_new == 1) {
      ++leading_decode;
    }
    for (int head_dim : {8, 16, 32, 64, 128}) {
      for (int block_size : {1, 16}) {
        const std::string what = label + " head_dim=" + std::to_string(head_dim) +
                                 " block_size=" + std::to_string(block_size);
        SCOPED_TRACE(what);
        const Problem p = MakeProblem(seqs, block_size, head_dim, 31 + head_dim + block_size,
                                      q_heads, kv_heads);
        const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
        std::vector<float> expected(static_cast<size_t>(p.num_tokens) * q_heads * head_dim);
        AttentionBatch host_batch = HostBatch(p);
        host_batch.sliding_window = window;
        cpu_->PagedAttention(p.q.data(), p.q_stride, host_batch, p.k_cache.data(),
                             p.v_cache.data(), p.shape, q_heads, scale, expected.data());

        DeviceProblem d(p);
        d.batch.sliding_window = window;
        d.batch.num_decode_seqs = leading_decode;
        cuda_->PagedAttention(d.q.get(), p.q_stride, d.batch, d.k_cache.get(),
                              d.v_cache.get(), p.shape, q_heads, scale, d.out.get());
        cuda_->Synchronize();
        ASSERT_TRUE(cuda_->status().ok()) << cuda_->status();
        ExpectAllClose(d.out.ToHost(), expected, 1e-4, what + " backend");

        for (gpu::SplitKernelVersion version :
             {gpu::SplitKernelVersion::kV1, gpu::SplitKernelVersion::kV2}) {
          if (!SplitV1Kept(p.shape, version)) continue;
          for (int partition : {7, 16, 0}) {
            DeviceArray<float> out(expected.size());
            const size_t bytes = gpu::AttentionSplitWorkspaceBytes(d.batch, p.shape, q_heads,
                                                                   partition, 0, version);
            DeviceArray<uint8_t> workspace(bytes);
            std::string error;
            ASSERT_TRUE(gpu::LaunchPagedAttentionSplit(
                d.q.get(), p.q_stride, d.batch, d.k_cache.get(), d.v_cache.get(), p.shape,
                q_heads, scale, partition, workspace.get(), bytes, out.get(), nullptr, &error,
                DType::kF32, 0, version))
                << error;
            ExpectAllClose(out.ToHost(), expected, 1e-4,
                           absl::StrCat(what, " split v", static_cast<int>(version) + 1,
                                        " partition=", partition));
          }
        }
        {
          DeviceArray<float> out(expected.size());
          std::string error;
          ASSERT_TRUE(gpu::LaunchPagedAttentionPrefill(d.q.get(), p.q_stride, d.batch,
                                                       d.k_cache.get(), d.v_cache.get(),
                                                       p.shape, q_heads, scale, out.get(),
                                                       nullptr, &error))
              << error;
          ExpectAllClose(out.ToHost(), expected, 1e-4, what + " prefill kernel");
        }
      }
    }
  }
};

TEST_F(CudaAttentionTest, DecodeBatchOf17) {
  std::vector<SeqSpec> seqs;
  for (int i = 0; i < 17; ++i) seqs.push_back({1 + (i * 29) % 97, 1});
  seqs[0].context_len = 97;  // Longest context; (0 * 29) % 97 would give 1.
  seqs[3].context_len = 16;  // Exactly one full block of 16.
  seqs[4].context_len = 17;  // One past a block boundary.
  CheckAllKernels(seqs, "decode");
}

TEST_F(CudaAttentionTest, PrefillAndMixedChunks) {
  // Whole prompts, chunks continuing a cached prefix, and decode tokens in one step.
  const std::vector<SeqSpec> seqs = {{97, 97}, {40, 7}, {1, 1},  {33, 16},
                                     {20, 1},  {64, 33}, {18, 17}};
  CheckAllKernels(seqs, "mixed");
}

// A continuous-batching step as the worker orders it: decode sequences first (split-K),
// then prefill chunks (tiled), over GQA groups of 1 to 8 query heads per KV head.
TEST_F(CudaAttentionTest, MixedStepDecodeFirstAcrossGqaGroups) {
  const std::vector<SeqSpec> seqs = {{97, 1}, {1, 1},  {17, 1},  {40, 1}, {64, 33},
                                     {20, 20}, {33, 16}, {18, 17}, {5, 1}};
  for (auto [q_heads, kv_heads] : std::vector<std::pair<int, int>>{
           {6, 2}, {4, 2}, {8, 2}, {16, 2}, {32, 4}, {8, 8}}) {
    const std::string label = "mixed q_heads=" + std::to_string(q_heads) +
                              " kv_heads=" + std::to_string(kv_heads);
    CheckAllKernels(seqs, label, 0, q_heads, kv_heads);
    CheckAllKernels(seqs, label + " window 37", 37, q_heads, kv_heads);
  }
  // Pure decode with the largest group.
  std::vector<SeqSpec> decode;
  for (int i = 0; i < 9; ++i) decode.push_back({1 + (i * 29) % 97, 1});
  CheckAllKernels(decode, "decode q_heads=32 kv_heads=4", 0, 32, 4);
}

// Sliding windows (Mistral, Qwen2) shorter than most contexts, starting mid-block and
// mid-tile, on decode and prefill batches; the CPU twin is itself checked against a masked
// reference in tests/kernels/attention_test.cc.
TEST_F(CudaAttentionTest, SlidingWindowMatchesCpu) {
  std::vector<SeqSpec> decode;
  for (int i = 0; i < 17; ++i) decode.push_back({1 + (i * 29) % 97, 1});
  const std::vector<SeqSpec> mixed = {{97, 97}, {40, 7}, {1, 1}, {33, 16}, {64, 33}};
  for (int window : {1, 5, 37, 64}) {
    CheckAllKernels(decode, "decode window " + std::to_string(window), window);
    CheckAllKernels(mixed, "mixed window " + std::to_string(window), window);
  }
}

// The step's own K/V written by WriteKvCache, then read by attention: the path the forward
// pass takes, on both backends.
TEST_F(CudaAttentionTest, WriteThenAttendMatchesCpu) {
  const std::vector<SeqSpec> seqs = {{50, 50}, {30, 3}, {9, 1}};
  const int head_dim = 64;
  Problem p = MakeProblem(seqs, 16, head_dim, 77);
  const int width = kKvHeads * head_dim;
  const std::vector<float> k_new = RandomFloats(static_cast<size_t>(p.num_tokens) * width, 78);
  const std::vector<float> v_new = RandomFloats(static_cast<size_t>(p.num_tokens) * width, 79);
  DeviceProblem d(p);
  DeviceArray<float> d_k(k_new), d_v(v_new);
  cpu_->WriteKvCache(k_new.data(), v_new.data(), width, p.slots.data(), p.num_tokens, p.shape,
                     p.k_cache.data(), p.v_cache.data());
  cuda_->WriteKvCache(d_k.get(), d_v.get(), width, d.slots.get(), p.num_tokens, p.shape,
                      d.k_cache.get(), d.v_cache.get());
  const float scale = 0.125f;
  std::vector<float> expected(static_cast<size_t>(p.num_tokens) * kQHeads * head_dim);
  cpu_->PagedAttention(p.q.data(), p.q_stride, HostBatch(p), p.k_cache.data(), p.v_cache.data(),
                       p.shape, kQHeads, scale, expected.data());
  cuda_->PagedAttention(d.q.get(), p.q_stride, d.batch, d.k_cache.get(), d.v_cache.get(),
                        p.shape, kQHeads, scale, d.out.get());
  cuda_->Synchronize();
  ExpectAllClose(d.out.ToHost(), expected, 1e-4, "write then attend");
}

// BF16 and FP8 caches: the CUDA writer stores the same bytes (and FP8 scales) as the CPU
// one, and both attentions read them alike.
TEST_F(CudaAttentionTest, QuantizedCachesMatchCpu) {
  for (DType dtype : {DType::kBF16, DType::kF8E4M3}) {
    SCOPED_TRACE(DTypeName(dtype));
    const std::vector<SeqSpec> seqs = {{50, 50}, {30, 3}, {9, 1}};
    const int head_dim = 64;
    Problem p = MakeProblem(seqs, 16, head_dim, 91);
    p.shape.dtype = dtype;
    const int width = kKvHeads * head_dim;
    const std::vector<float> k_new = RandomFloats(static_cast<size_t>(p.num_tokens) * width, 92);
    const std::vector<float> v_new = RandomFloats(static_cast<size_t>(p.num_tokens) * width, 93);
    std::vector<uint8_t> k_cache(p.shape.bytes(), 0), v_cache(p.shape.bytes(), 0);
    DeviceProblem d(p);
    DeviceArray<float> d_k(k_new), d_v(v_new);
    DeviceArray<uint8_t> d_kc(k_cache), d_vc(v_cache);
    cpu_->WriteKvCache(k_new.data(), v_new.data(), width, p.slots.data(), p.num_tokens, p.shape,
                       k_cache.data(), v_cache.data());
    cuda_->WriteKvCache(d_k.get(), d_v.get(), width, d.slots.get(), p.num_tokens, p.shape,
                        d_kc.get(), d_vc.get());
    const float scale = 0.125f;
    std::vector<float> expected(static_cast<size_t>(p.num_tokens) * kQHeads * head_dim);
    cpu_->PagedAttention(p.q.data(), p.q_stride, HostBatch(p), k_cache.data(), v_cache.data(),
                         p.shape, kQHeads, scale, expected.data());
    cuda_->PagedAttention(d.q.get(), p.q_stride, d.batch, d_kc.get(), d_vc.get(), p.shape,
                          kQHeads, scale, d.out.get());
    cuda_->Synchronize();
    EXPECT_EQ(d_kc.ToHost(), k_cache);
    EXPECT_EQ(d_vc.ToHost(), v_cache);
    // The 50-token prompt takes the tensor-core prefill (BF16 operands) on sm_80+.
    ExpectAllClose(d.out.ToHost(), expected, kBf16AttentionTolerance, "quantized cache");
  }
}

// The tensor-core prefill kernel against the CPU backend on the same BF16 / FP8 cache
// bytes: prompts longer than one 64-row tile, chunks after a cached prefix, single tokens,
// GQA groups, block sizes 1 and 16, with and without a sliding window. Q and P are rounded
// to BF16 on the way into the tensor cores: kBf16AttentionTolerance says what that costs.
TEST_F(CudaAttentionTest, TensorCorePrefillMatchesCpuAtBf16Precision) {
  int major = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  if (major < 8) GTEST_SKIP() << "BF16 tensor cores need compute capability 8.0";
  const std::vector<SeqSpec> seqs = {{130, 130}, {97, 40}, {40, 7}, {5, 5}, {20, 1}, {70, 65}};
  for (DType dtype : {DType::kBF16, DType::kF8E4M3}) {
    for (int head_dim : {64, 128}) {
      for (int block_size : {1, 16}) {
        for (auto [q_heads, kv_heads] : std::vector<std::pair<int, int>>{{6, 2}, {8, 1}}) {
          for (int window : {0, 37}) {
            const std::string what = absl::StrCat(DTypeName(dtype), " head_dim=", head_dim,
                                                  " block_size=", block_size, " q_heads=",
                                                  q_heads, " kv_heads=", kv_heads, " window=", window);
            SCOPED_TRACE(what);
            Problem p = MakeProblem(seqs, block_size, head_dim, 200 + head_dim + block_size,
                                    q_heads, kv_heads);
            p.shape.dtype = dtype;
            const auto [k_cache, v_cache] = CacheBytes(*cpu_, p);
            const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
            const std::vector<float> expected =
                CpuAttention(*cpu_, p, k_cache, v_cache, window, scale);
            DeviceProblem d(p);
            d.batch.sliding_window = window;
            DeviceArray<uint8_t> d_kc(k_cache), d_vc(v_cache);
            std::string error;
            ASSERT_TRUE(gpu::LaunchPagedAttentionPrefillTc(d.q.get(), p.q_stride, d.batch,
                                                           d_kc.get(), d_vc.get(), p.shape,
                                                           q_heads, scale, d.out.get(), nullptr,
                                                           &error))
                << error;
            ExpectAllClose(d.out.ToHost(), expected, kBf16AttentionTolerance, what);
          }
        }
      }
    }
  }
}

// The split-KV plan (kernels/cuda/decode_plan.h) on decode batches the cases above never
// reach: one sequence of 4,100 tokens in a table twice as wide (the plan cuts by the
// table's width, and the sequence must still spread its own keys over every partition),
// and 64 sequences mixing short and long contexts; GQA groups of 1, 4 and 8, head_dim 64
// and 128, block sizes 1 and 16, a sliding window, F32 / BF16 / FP8 caches, both kernel
// versions, and plans for 132 and for 16 SMs (many partitions and few).
TEST_F(CudaAttentionTest, SplitKvPlanOnLongAndMixedDecodeBatches) {
  struct Case {
    std::string label;
    std::vector<SeqSpec> seqs;
    int table_keys;  // Width of the block table, in keys.
  };
  std::vector<SeqSpec> mixed;
  for (int i = 0; i < 64; ++i) {
    mixed.push_back({i % 8 == 0 ? 1500 + 37 * i : 1 + (i * 53) % 300, 1});
  }
  const std::vector<Case> cases = {{"batch 1 long", {{4100, 1}}, 8192},
                                   {"batch 64 mixed", mixed, 4096}};
  for (const Case& c : cases) {
    for (int head_dim : {64, 128}) {
      for (int block_size : {1, 16}) {
        for (auto [q_heads, kv_heads] :
             std::vector<std::pair<int, int>>{{2, 2}, {8, 2}, {8, 1}}) {
          for (int window : {0, 1000}) {
            for (DType dtype : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
              const std::string what = absl::StrCat(
                  c.label, " head_dim=", head_dim, " block_size=", block_size, " q_heads=",
                  q_heads, " kv_heads=", kv_heads, " window=", window, " cache=",
                  DTypeName(dtype));
              SCOPED_TRACE(what);
              Problem p = MakeProblem(c.seqs, block_size, head_dim, 500 + head_dim + block_size,
                                      q_heads, kv_heads, c.table_keys / block_size);
              p.shape.dtype = dtype;
              const auto [k_cache, v_cache] = CacheBytes(*cpu_, p);
              const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
              const std::vector<float> expected =
                  CpuAttention(*cpu_, p, k_cache, v_cache, window, scale);

              DeviceProblem d(p);
              d.batch.sliding_window = window;
              d.batch.num_decode_seqs = p.num_seqs;
              DeviceArray<uint8_t> d_kc(k_cache), d_vc(v_cache);
              cuda_->PagedAttention(d.q.get(), p.q_stride, d.batch, d_kc.get(), d_vc.get(),
                                    p.shape, q_heads, scale, d.out.get());
              cuda_->Synchronize();
              ASSERT_TRUE(cuda_->status().ok()) << cuda_->status();
              ExpectAllClose(d.out.ToHost(), expected, 1e-4, what + " backend");

              for (gpu::SplitKernelVersion version :
                   {gpu::SplitKernelVersion::kV1, gpu::SplitKernelVersion::kV2}) {
                if (!SplitV1Kept(p.shape, version)) continue;
                for (int sms : {132, 16}) {
                  DeviceArray<float> out(expected.size());
                  const size_t bytes = gpu::AttentionSplitWorkspaceBytes(d.batch, p.shape,
                                                                         q_heads, 0, sms, version);
                  DeviceArray<uint8_t> workspace(bytes);
                  std::string error;
                  ASSERT_TRUE(gpu::LaunchPagedAttentionSplit(
                      d.q.get(), p.q_stride, d.batch, d_kc.get(), d_vc.get(), p.shape, q_heads,
                      scale, 0, workspace.get(), bytes, out.get(), nullptr, &error, DType::kF32,
                      sms, version))
                      << error;
                  ExpectAllClose(out.ToHost(), expected, 1e-4,
                                 absl::StrCat(what, " split v", static_cast<int>(version) + 1,
                                              " sms=", sms));
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST_F(CudaAttentionTest, UnsupportedHeadDimIsReportedByTheBackend) {
  const Problem p = MakeProblem({{5, 1}}, 16, 8, 5);
  DeviceProblem d(p);
  KvCacheShape shape = p.shape;
  shape.head_dim = 96;
  cuda_->PagedAttention(d.q.get(), p.q_stride, d.batch, d.k_cache.get(), d.v_cache.get(),
                        shape, kQHeads, 1.0f, d.out.get());
  EXPECT_FALSE(cuda_->status().ok());
  EXPECT_NE(std::string(cuda_->status().message()).find("head_dim 96"), std::string::npos)
      << cuda_->status();
  cuda_.reset();  // The recorded error is the expected outcome; skip TearDown's check.
}

// ---- BF16 activations (the CUDA backend's default): q in BF16, out in BF16, float32
// scores, softmax and accumulation. Both sides see the same BF16-rounded q (the CPU
// widened) and the same cache bytes (F32, BF16 and FP8 caches); the CUDA output is rounded
// once to BF16 (kBf16Tolerance), and the tensor-core kernel rounds P too
// (kBf16AttentionTolerance).
class CudaBf16AttentionTest : public CudaBf16VsCpuTest {
 protected:
  void CheckAllKernels(const std::vector<SeqSpec>& seqs, const std::string& label) {
    int leading_decode = 0;
    while (leading_decode < static_cast<int>(seqs.size()) && seqs[leading_decode].num_new == 1) {
      ++leading_decode;
    }
    int major = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    for (DType cache_dtype : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
      for (int head_dim : {32, 64, 128}) {
        const int block_size = 16;
        const std::string what = absl::StrCat(label, " cache=", DTypeName(cache_dtype),
                                              " head_dim=", head_dim);
        SCOPED_TRACE(what);
        Problem p = MakeProblem(seqs, block_size, head_dim, 400 + head_dim);
        p.q = RoundedToBf16(p.q);
        p.shape.dtype = cache_dtype;
        const auto [k_cache, v_cache] = CacheBytes(*cpu_, p);
        const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
        std::vector<float> expected(static_cast<size_t>(p.num_tokens) * p.q_heads * head_dim);
        cpu_->PagedAttention(p.q.data(), p.q_stride, HostBatch(p), k_cache.data(),
                             v_cache.data(), p.shape, p.q_heads, scale, expected.data());

        DeviceProblem d(p);
        d.batch.num_decode_seqs = leading_decode;
        DeviceArray<uint16_t> d_q(Bf16Bits(p.q)), d_out(expected.size());
        DeviceArray<uint8_t> d_kc(k_cache), d_vc(v_cache);
        cuda_->PagedAttention(d_q.get(), p.q_stride, d.batch, d_kc.get(), d_vc.get(), p.shape,
                              p.q_heads, scale, d_out.get());
        cuda_->Synchronize();
        ASSERT_TRUE(cuda_->status().ok()) << cuda_->status();
        // The backend takes the tensor-core kernel for prefill rows on sm_80+.
        ExpectAllClose(Bf16Values(d_out.ToHost()), expected, kBf16AttentionTolerance,
                       what + " backend");

        std::string error;
        for (gpu::SplitKernelVersion version :
             {gpu::SplitKernelVersion::kV1, gpu::SplitKernelVersion::kV2}) {
          if (!SplitV1Kept(p.shape, version)) continue;
          for (int partition : {16, 0}) {
            DeviceArray<uint16_t> out(expected.size());
            const size_t bytes = gpu::AttentionSplitWorkspaceBytes(d.batch, p.shape, p.q_heads,
                                                                   partition, 0, version);
            DeviceArray<uint8_t> workspace(bytes);
            ASSERT_TRUE(gpu::LaunchPagedAttentionSplit(
                d_q.get(), p.q_stride, d.batch, d_kc.get(), d_vc.get(), p.shape, p.q_heads,
                scale, partition, workspace.get(), bytes, out.get(), nullptr, &error,
                DType::kBF16, 0, version))
                << error;
            ExpectAllClose(Bf16Values(out.ToHost()), expected, kBf16Tolerance,
                           absl::StrCat(what, " split v", static_cast<int>(version) + 1,
                                        " partition=", partition));
          }
        }
        {
          DeviceArray<uint16_t> out(expected.size());
          ASSERT_TRUE(gpu::LaunchPagedAttentionPrefill(d_q.get(), p.q_stride, d.batch,
                                                       d_kc.get(), d_vc.get(), p.shape,
                                                       p.q_heads, scale, out.get(), nullptr,
                                                       &error, DType::kBF16))
              << error;
          ExpectAllClose(Bf16Values(out.ToHost()), expected, kBf16Tolerance,
                         what + " prefill kernel");
        }
        if (major >= 8 && gpu::AttentionPrefillTcSupported(p.shape)) {
          DeviceArray<uint16_t> out(expected.size());
          ASSERT_TRUE(gpu::LaunchPagedAttentionPrefillTc(d_q.get(), p.q_stride, d.batch,
                                                         d_kc.get(), d_vc.get(), p.shape,
                                                         p.q_heads, scale, out.get(), nullptr,
                                                         &error, DType::kBF16))
              << error;
          ExpectAllClose(Bf16Values(out.ToHost()), expected, kBf16AttentionTolerance,
                         what + " tensor-core prefill kernel");
        }
      }
    }
  }
};

TEST_F(CudaBf16AttentionTest, DecodeBatchOf17) {
  std::vector<SeqSpec> seqs;
  for (int i = 0; i < 17; ++i) seqs.push_back({1 + (i * 29) % 97, 1});
  seqs[0].context_len = 97;
  CheckAllKernels(seqs, "decode");
}

TEST_F(CudaBf16AttentionTest, PrefillAndMixedChunks) {
  const std::vector<SeqSpec> seqs = {{20, 1}, {9, 1}, {130, 130}, {40, 7}, {33, 16}, {70, 65}};
  CheckAllKernels(seqs, "mixed");
}

// K and V rows in BF16 (the qkv buffer) into F32, BF16 and FP8 caches: the same bytes as
// the CPU writes from the widened rows (BF16 values are exact in every cache dtype but FP8,
// whose per-row scale and rounding both sides compute alike from the same floats).
TEST_F(CudaBf16AttentionTest, WriteKvCacheFromBf16Rows) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
    SCOPED_TRACE(DTypeName(dtype));
    Problem p = MakeProblem({{50, 50}, {30, 3}, {9, 1}}, 16, 64, 95);
    p.shape.dtype = dtype;
    // Rows of a fused qkv buffer: K then V, row stride 2 * width + 5.
    const int width = kKvHeads * 64;
    const int stride = 2 * width + 5;
    const std::vector<float> rows =
        RoundedToBf16(RandomFloats(static_cast<size_t>(p.num_tokens) * stride, 96, -4.0f, 4.0f));
    std::vector<uint8_t> k_cache(p.shape.bytes(), 0), v_cache(p.shape.bytes(), 0);
    DeviceProblem d(p);
    DeviceArray<uint16_t> d_rows(Bf16Bits(rows));
    DeviceArray<uint8_t> d_kc(k_cache), d_vc(v_cache);
    cpu_->WriteKvCache(rows.data(), rows.data() + width, stride, p.slots.data(), p.num_tokens,
                       p.shape, k_cache.data(), v_cache.data());
    cuda_->WriteKvCache(d_rows.get(), d_rows.get() + width, stride, d.slots.get(), p.num_tokens,
                        p.shape, d_kc.get(), d_vc.get());
    cuda_->Synchronize();
    ASSERT_TRUE(cuda_->status().ok()) << cuda_->status();
    EXPECT_EQ(d_kc.ToHost(), k_cache);
    EXPECT_EQ(d_vc.ToHost(), v_cache);
  }
}

}  // namespace
}  // namespace tessera::kernels::cuda_testing
