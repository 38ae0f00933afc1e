#include "benchmarks/roofline/memory_bandwidth.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include "kernels/cpu/host_memory.h"

namespace tessera::bench {
namespace {
constexpr int64_t kGrain = int64_t{1} << 16;  // 512 KiB of words per chunk at least.
}  // namespace

uint64_t SumWords(const uint64_t* words, int64_t begin, int64_t end) {
  uint64_t s = 0;
  for (int64_t i = begin; i < end; ++i) s += words[i];
  return s;
}

uint64_t ParallelRead(const uint64_t* words, size_t count, kernels::ThreadPool& pool) {
  std::atomic<uint64_t> total{0};
  pool.ParallelFor(static_cast<int64_t>(count), kGrain, [&](int64_t b, int64_t e) {
    total.fetch_add(SumWords(words, b, e), std::memory_order_relaxed);
  });
  return total.load();
}

void ParallelFill(uint64_t* words, size_t count, kernels::ThreadPool& pool) {
  pool.ParallelFor(static_cast<int64_t>(count), kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) words[i] = static_cast<uint64_t>(i);
  });
}

BandwidthResult MeasureReadBandwidth(kernels::ThreadPool& pool, size_t buffer_bytes, int repetitions) {
  BandwidthResult r;
  const size_t count = buffer_bytes / sizeof(uint64_t);
  r.buffer_bytes = count * sizeof(uint64_t);
  r.threads = pool.num_threads();
  r.repetitions = std::max(repetitions, 1);
  // The same huge-page allocation as the weights (kernels/cpu/host_memory.h), so the
  // ceiling is not lowered by TLB misses the decode step does not have.
  std::unique_ptr<uint64_t, void (*)(void*)> words(
      static_cast<uint64_t*>(kernels::AllocateHostMemory(count * sizeof(uint64_t), 64)),
      &kernels::FreeHostMemory);
  ParallelFill(words.get(), count, pool);
  std::vector<double> rates;
  volatile uint64_t sink = 0;
  for (int i = 0; i < r.repetitions; ++i) {
    const auto start = std::chrono::steady_clock::now();
    sink = sink + ParallelRead(words.get(), count, pool);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rates.push_back(static_cast<double>(r.buffer_bytes) / seconds);
  }
  std::sort(rates.begin(), rates.end());
  r.best_bytes_per_second = rates.back();
  r.median_bytes_per_second = rates[rates.size() / 2];
  return r;
}

}  // namespace tessera::bench
