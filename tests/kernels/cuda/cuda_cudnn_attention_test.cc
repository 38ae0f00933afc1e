// cuDNN's paged SDPA candidate (kernels/cuda/cudnn_attention.h) against the CPU backend's
// PagedAttention on the same BF16 data: head_dim 64 and 128, GQA groups 1, 4 and 8, block
// sizes 16 and 32 (and 1 where cuDNN takes it), whole prompts and chunked prefill (a cached
// prefix) of different lengths in one batch, sliding windows, and the shapes it refuses.
// The GPU cases skip, with the reason, where no device is visible or cuDNN cannot be loaded.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cudnn_attention.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace tessera::kernels::cuda_testing {
namespace {

struct SeqSpec {
  int context_len;  // Tokens in the cache after the step.
  int num_new;      // Of which computed in this step (the last ones).
};

// One step's host data: BF16-rounded queries and caches (as floats for the CPU, as bits for
// the device), and the batch arrays.
struct Problem {
  KvCacheShape shape;
  int q_heads = 0;
  int q_stride = 0;
  int num_seqs = 0;
  int num_tokens = 0;
  int max_blocks = 0;
  CudnnHostBatchInfo host;
  std::vector<int32_t> query_start;
  std::vector<int32_t> context_lens;
  std::vector<int32_t> block_tables;
  std::vector<float> q;  // [num_tokens, q_stride], BF16 values.
  std::vector<uint16_t> k_cache, v_cache;  // BF16 bits.
};

// Blocks come from a shuffled list with block 0 unused, as in the real pool, so a wrong page
// lookup reads the wrong keys; tables carry one spare (zero) column. `num_blocks` > 0 fixes
// the cache container (part of a cuDNN graph's shape), else it is what the step needs + 5.
Problem MakeProblem(const std::vector<SeqSpec>& seqs, int block_size, int head_dim,
                    int q_heads, int kv_heads, uint32_t seed, int num_blocks = 0) {
  Problem p;
  p.q_heads = q_heads;
  p.num_seqs = static_cast<int>(seqs.size());
  int total_blocks = 0;
  for (const SeqSpec& s : seqs) {
    const int blocks = (s.context_len + block_size - 1) / block_size;
    total_blocks += blocks;
    p.max_blocks = std::max(p.max_blocks, blocks + 1);
    p.host.max_query_len = std::max(p.host.max_query_len, s.num_new);
    p.host.max_context_len = std::max(p.host.max_context_len, s.context_len);
  }
  p.shape.num_blocks = std::max(num_blocks, total_blocks + 5);
  p.shape.block_size = block_size;
  p.shape.num_kv_heads = kv_heads;
  p.shape.head_dim = head_dim;
  p.shape.dtype = DType::kBF16;

  std::vector<int32_t> free_blocks(p.shape.num_blocks - 1);
  std::iota(free_blocks.begin(), free_blocks.end(), 1);
  std::mt19937 rng(seed);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
  size_t next_block = 0;
  p.block_tables.assign(static_cast<size_t>(p.num_seqs) * p.max_blocks, 0);
  p.query_start.push_back(0);
  for (int s = 0; s < p.num_seqs; ++s) {
    const int blocks = (seqs[s].context_len + block_size - 1) / block_size;
    for (int b = 0; b < blocks; ++b) {
      p.block_tables[static_cast<size_t>(s) * p.max_blocks + b] = free_blocks[next_block++];
    }
    p.context_lens.push_back(seqs[s].context_len);
    p.query_start.push_back(p.query_start.back() + seqs[s].num_new);
  }
  p.num_tokens = p.query_start.back();
  // Queries at the front of fused qkv rows, as the forward pass hands them over.
  p.q_stride = (q_heads + 2 * kv_heads) * head_dim;
  p.q = RoundedToBf16(
      RandomFloats(static_cast<size_t>(p.num_tokens) * p.q_stride, seed + 1, -2.0f, 2.0f));
  p.k_cache = Bf16Bits(RandomFloats(p.shape.elements(), seed + 2));
  p.v_cache = Bf16Bits(RandomFloats(p.shape.elements(), seed + 3));
  return p;
}

AttentionBatch HostBatch(const Problem& p, int window) {
  AttentionBatch b;
  b.num_seqs = p.num_seqs;
  b.num_tokens = p.num_tokens;
  b.query_start = p.query_start.data();
  b.context_lens = p.context_lens.data();
  b.block_tables = p.block_tables.data();
  b.max_blocks_per_seq = p.max_blocks;
  b.sliding_window = window;
  return b;
}

// A mixed prefill step: whole prompts (num_new == context_len), chunks after a cached prefix
// (num_new < context_len, the prefix crossing block boundaries), one decode-like row, and
// lengths that are no multiple of the block size. Five sequences also leave the graph's
// batch bucket (8) with padded entries.
const std::vector<SeqSpec> kMixedStep = {
    {97, 97}, {70, 13}, {130, 33}, {16, 16}, {45, 1},
};

class CudnnAttentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = NoDeviceReason();
    if (!why.empty()) GTEST_SKIP() << "no CUDA device, skipping GPU test: " << why;
    absl::StatusOr<std::unique_ptr<CudnnPagedPrefill>> prefill = CudnnPagedPrefill::Create();
    if (absl::IsUnavailable(prefill.status())) {
      GTEST_SKIP() << "cuDNN unavailable, skipping: " << prefill.status();
    }
    ASSERT_TRUE(prefill.ok()) << prefill.status();
    prefill_ = *std::move(prefill);
    cpu_ = MakeCpuBackend(2);
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) {
      EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      cudaStreamDestroy(stream_);
    }
  }

  // Runs cuDNN on the problem; on success compares with the CPU backend. Returns Run's
  // status so callers can accept a documented refusal (Unimplemented).
  absl::Status RunAndCompare(const Problem& p, int window, const std::string& what) {
    SCOPED_TRACE(what);
    const float scale = 1.0f / std::sqrt(static_cast<float>(p.shape.head_dim));
    const size_t out_elements = static_cast<size_t>(p.num_tokens) * p.q_heads * p.shape.head_dim;

    DeviceArray<int32_t> query_start(p.query_start), context_lens(p.context_lens),
        block_tables(p.block_tables);
    DeviceArray<uint16_t> q(Bf16Bits(p.q)), k_cache(p.k_cache), v_cache(p.v_cache),
        out(out_elements);
    AttentionBatch batch = HostBatch(p, window);
    batch.query_start = query_start.get();
    batch.context_lens = context_lens.get();
    batch.block_tables = block_tables.get();
    const absl::Status status =
        prefill_->Run(q.get(), p.q_stride, batch, p.shape, k_cache.get(), v_cache.get(),
                      p.q_heads, scale, out.get(), stream_, p.host);
    if (!status.ok()) return status;
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess) << what;

    // The CPU reads the same BF16 cache bytes and the BF16-rounded queries, widened.
    std::vector<float> expected(out_elements);
    cpu_->PagedAttention(p.q.data(), p.q_stride, HostBatch(p, window), p.k_cache.data(),
                         p.v_cache.data(), p.shape, p.q_heads, scale, expected.data());
    // cuDNN rounds P to BF16 for the tensor cores and O once to BF16, as our tensor-core
    // kernel does: kBf16AttentionTolerance covers both.
    ExpectAllClose(Bf16Values(out.ToHost()), expected, kBf16AttentionTolerance, what);
    return absl::OkStatus();
  }

  std::unique_ptr<CudnnPagedPrefill> prefill_;
  std::unique_ptr<Backend> cpu_;
  cudaStream_t stream_ = nullptr;
};

TEST_F(CudnnAttentionTest, MatchesCpuAcrossHeadDimsGqaGroupsAndBlockSizes) {
  struct Heads {
    int q, kv;
  };
  for (int head_dim : {64, 128}) {
    for (Heads heads : {Heads{4, 4}, Heads{8, 2}, Heads{16, 2}}) {  // Groups 1, 4, 8.
      for (int block_size : {16, 32}) {
        const std::string what =
            absl::StrCat("head_dim=", head_dim, " q_heads=", heads.q, " kv_heads=", heads.kv,
                         " block_size=", block_size);
        const Problem p = MakeProblem(kMixedStep, block_size, head_dim, heads.q, heads.kv,
                                      7 + head_dim + heads.q + block_size);
        const absl::Status status = RunAndCompare(p, /*window=*/0, what);
        ASSERT_TRUE(status.ok()) << what << ": " << status;
      }
    }
  }
}

TEST_F(CudnnAttentionTest, ChunkedPrefillOfOneLongSequence) {
  // A 300-token prefix already cached, the next 64 tokens in this step: every query sees
  // the whole prefix and a causal slice of its own chunk.
  const Problem p = MakeProblem({{364, 64}}, 16, 128, 8, 1, 91);
  const absl::Status status = RunAndCompare(p, 0, "one chunk after a 300-token prefix");
  ASSERT_TRUE(status.ok()) << status;
}

TEST_F(CudnnAttentionTest, BlockSizeOneWhereCudnnTakesIt) {
  const Problem p = MakeProblem(kMixedStep, /*block_size=*/1, 64, 8, 2, 55);
  const absl::Status status = RunAndCompare(p, 0, "block_size=1");
  if (absl::IsUnimplemented(status)) {
    GTEST_SKIP() << "this cuDNN refuses one-token pages: " << status;
  }
  ASSERT_TRUE(status.ok()) << status;
}

TEST_F(CudnnAttentionTest, SlidingWindowMatchesCpuOrIsUnimplemented) {
  for (int window : {8, 32, 100}) {
    for (int head_dim : {64, 128}) {
      const std::string what = absl::StrCat("window=", window, " head_dim=", head_dim);
      const Problem p = MakeProblem(kMixedStep, 16, head_dim, 8, 2, 300 + window + head_dim);
      const absl::Status status = RunAndCompare(p, window, what);
      if (absl::IsUnimplemented(status)) {
        // The documented refusal of a cuDNN without bottom-right sliding windows for
        // variable lengths; anything else is a failure.
        GTEST_SKIP() << "cuDNN " << prefill_->cudnn_version()
                     << " has no paged sliding window: " << status;
      }
      ASSERT_TRUE(status.ok()) << what << ": " << status;
    }
  }
}

TEST_F(CudnnAttentionTest, GraphsAreCachedPerBucket) {
  // Two steps in the same buckets (5 sequences -> batch 8, longest query 97 or 80 -> 128,
  // longest context 130 or 200 -> 256) over the same cache container share a graph; a
  // longer context takes a second one.
  constexpr int kBlocks = 64;
  ASSERT_TRUE(
      RunAndCompare(MakeProblem(kMixedStep, 16, 64, 8, 2, 1, kBlocks), 0, "first").ok());
  const std::vector<SeqSpec> same_buckets = {{120, 80}, {60, 60}, {200, 9}, {33, 2}, {17, 17}};
  ASSERT_TRUE(
      RunAndCompare(MakeProblem(same_buckets, 16, 64, 8, 2, 2, kBlocks), 0, "same buckets")
          .ok());
  EXPECT_EQ(prefill_->num_cached_graphs(), 1u);

  ASSERT_TRUE(
      RunAndCompare(MakeProblem({{600, 20}}, 16, 64, 8, 2, 3, kBlocks), 0, "longer").ok());
  EXPECT_EQ(prefill_->num_cached_graphs(), 2u);
}

TEST_F(CudnnAttentionTest, RunRefusesUnsupportedCaches) {
  Problem p = MakeProblem({{20, 20}}, 16, 64, 4, 4, 9);
  for (DType dtype : {DType::kF8E4M3, DType::kF32}) {
    p.shape.dtype = dtype;
    const absl::Status status = RunAndCompare(p, 0, DTypeName(dtype));
    EXPECT_TRUE(absl::IsUnimplemented(status)) << status;
  }
}

// Needs neither a device nor cuDNN: the refusals known from the shape alone.
TEST(CudnnPagedPrefillSupportTest, RefusesWhatItCannotRun) {
  KvCacheShape shape;
  shape.num_blocks = 8;
  shape.block_size = 16;
  shape.num_kv_heads = 2;
  shape.head_dim = 128;
  shape.dtype = DType::kBF16;
  const int q_stride = (8 + 2 * 2) * 128;
  EXPECT_TRUE(CudnnPagedPrefill::CheckSupported(shape, 8, q_stride).ok());

  for (DType dtype : {DType::kF8E4M3, DType::kF32}) {
    KvCacheShape s = shape;
    s.dtype = dtype;
    EXPECT_TRUE(absl::IsUnimplemented(CudnnPagedPrefill::CheckSupported(s, 8, q_stride)))
        << DTypeName(dtype);
  }
  for (int head_dim : {32, 96, 256}) {
    KvCacheShape s = shape;
    s.head_dim = head_dim;
    EXPECT_TRUE(absl::IsUnimplemented(
        CudnnPagedPrefill::CheckSupported(s, 8, (8 + 4) * head_dim)))
        << head_dim;
  }
  // 5 query heads over 2 KV heads is no GQA grouping; a q_stride narrower than the heads.
  EXPECT_TRUE(absl::IsInvalidArgument(CudnnPagedPrefill::CheckSupported(shape, 5, q_stride)));
  EXPECT_TRUE(absl::IsInvalidArgument(CudnnPagedPrefill::CheckSupported(shape, 8, 8 * 64)));
}

// Runs everywhere: on a machine without a device or without cuDNN, Create reports that as
// Unavailable (with the reason) instead of exiting or throwing.
TEST(CudnnPagedPrefillSupportTest, CreateSucceedsOrIsUnavailable) {
  const absl::StatusOr<std::unique_ptr<CudnnPagedPrefill>> prefill = CudnnPagedPrefill::Create();
  if (prefill.ok()) {
    EXPECT_GE((*prefill)->cudnn_version(), CudnnPagedPrefill::kMinCudnnVersion);
  } else {
    EXPECT_TRUE(absl::IsUnavailable(prefill.status())) << prefill.status();
    std::cout << "CudnnPagedPrefill::Create: " << prefill.status() << "\n";
  }
}

}  // namespace
}  // namespace tessera::kernels::cuda_testing
