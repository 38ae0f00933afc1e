#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/host_memory.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/gemm.h"
#include "tests/kernels/reference_util.h"

namespace tessera::kernels {
namespace {

using testing::MakeStoredMatrix;
using testing::RandomFloats;

TEST(CpuBackendTest, AllocationsAreAlignedAndDistinct) {
  std::unique_ptr<Backend> backend = MakeCpuBackend(2);
  EXPECT_EQ(backend->name(), "cpu");
  std::set<void*> seen;
  std::vector<void*> ptrs;
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{1000},
                       size_t{1} << 20}) {
    void* p = backend->Allocate(bytes);
    ASSERT_NE(p, nullptr) << bytes << " bytes";
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kCpuAllocAlignment, 0u) << bytes << " bytes";
    EXPECT_TRUE(seen.insert(p).second);
    std::memset(p, 0xab, bytes);  // The whole request is usable.
    ptrs.push_back(p);
  }
  for (void* p : ptrs) backend->Free(p);
  backend->Free(nullptr);
}

// Weights and KV caches go to 2 MiB-aligned mappings that may use transparent huge pages;
// they must be whole, writable, distinct, and go back to the system when freed.
TEST(CpuBackendTest, LargeAllocationsAreHugePageAligned) {
  std::unique_ptr<Backend> backend = MakeCpuBackend(1);
  std::vector<void*> ptrs;
  for (size_t bytes : {kHugePageBytes, 3 * kHugePageBytes + 5, size_t{40} << 20}) {
    void* p = backend->Allocate(bytes);
    ASSERT_NE(p, nullptr) << bytes << " bytes";
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePageBytes, 0u) << bytes << " bytes";
    std::memset(p, 0x5a, bytes);
    EXPECT_EQ(static_cast<unsigned char*>(p)[bytes - 1], 0x5a);
    ptrs.push_back(p);
  }
  std::printf("huge pages in use: %zu MiB\n", ProcessHugePageBytes() >> 20);
  for (void* p : ptrs) backend->Free(p);
  // Another round reuses the address space rather than leaking it.
  void* again = backend->Allocate(size_t{40} << 20);
  ASSERT_NE(again, nullptr);
  backend->Free(again);
}

TEST(CpuBackendTest, CopiesRoundTrip) {
  std::unique_ptr<Backend> backend = MakeCpuBackend(1);
  const std::vector<float> host = RandomFloats(1000, 3);
  void* dev = backend->Allocate(host.size() * sizeof(float));
  backend->CopyToDevice(dev, host.data(), host.size() * sizeof(float));
  std::vector<float> back(host.size());
  backend->CopyToHost(back.data(), dev, back.size() * sizeof(float));
  backend->Synchronize();
  EXPECT_EQ(back, host);
  backend->Free(dev);
}

TEST(CpuBackendTest, FreeMemoryIsPositiveAndAtMostTotal) {
  std::unique_ptr<Backend> backend = MakeCpuBackend(1);
  const size_t free_bytes = backend->FreeMemoryBytes();
  EXPECT_GT(free_bytes, 0u);
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemTotal:") {
      EXPECT_LE(free_bytes, kib * 1024);
      break;
    }
  }
}

// The interface forwards to the kernels: a small decode layer slice through Backend.
TEST(CpuBackendTest, OpsThroughTheInterfaceMatchTheKernels) {
  std::unique_ptr<Backend> backend = MakeCpuBackend(0);
  const int64_t m = 2, n = 40, k = 96;
  const std::vector<float> x = RandomFloats(m * k, 1);
  const auto w = MakeStoredMatrix(n * k, DType::kBF16, 2);
  const MatrixView view{w.bytes.data(), DType::kBF16, n, k};
  std::vector<float> via_backend(m * n), direct(m * n);
  backend->Gemm(x.data(), m, view, via_backend.data());
  Gemm(x.data(), m, view, direct.data(), nullptr);
  for (int64_t i = 0; i < m * n; ++i) EXPECT_NEAR(via_backend[i], direct[i], 1e-5);

  // Single-token attention over a one-block cache is the softmax-weighted V average.
  KvCacheShape shape{/*num_blocks=*/2, /*block_size=*/4, /*num_kv_heads=*/1, /*head_dim=*/8};
  std::vector<float> k_cache(shape.elements(), 0.0f), v_cache(shape.elements(), 0.0f);
  const std::vector<float> kv = RandomFloats(3 * 8, 4);
  const std::vector<int64_t> slots = {4, 5, 6};  // Block 1, offsets 0..2.
  backend->WriteKvCache(kv.data(), kv.data(), 8, slots.data(), 3, shape, k_cache.data(),
                        v_cache.data());
  const std::vector<float> q(8, 0.0f);  // Equal scores: a plain mean.
  const std::vector<int32_t> query_start = {0, 1}, context_lens = {3}, block_table = {1};
  AttentionBatch batch;
  batch.num_seqs = 1;
  batch.num_tokens = 1;
  batch.query_start = query_start.data();
  batch.context_lens = context_lens.data();
  batch.block_tables = block_table.data();
  batch.max_blocks_per_seq = 1;
  std::vector<float> out(8);
  backend->PagedAttention(q.data(), 8, batch, k_cache.data(), v_cache.data(), shape, 1, 1.0f,
                          out.data());
  for (int d = 0; d < 8; ++d) {
    EXPECT_NEAR(out[d], (kv[d] + kv[8 + d] + kv[16 + d]) / 3.0f, 1e-6) << "dim " << d;
  }
}

}  // namespace
}  // namespace tessera::kernels
