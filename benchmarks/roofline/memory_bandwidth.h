#ifndef TESSERA_BENCHMARKS_ROOFLINE_MEMORY_BANDWIDTH_H_
#define TESSERA_BENCHMARKS_ROOFLINE_MEMORY_BANDWIDTH_H_

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/thread_pool.h"

// Memory read bandwidth: the ceiling of every memory-bound kernel, shared by kernel_bench's
// BM_MemoryReadBandwidth and tessera-roofline so both measure the same thing.
namespace tessera::bench {

// Sum of words[begin, end): an integer streaming read the compiler vectorises.
uint64_t SumWords(const uint64_t* words, int64_t begin, int64_t end);

// Reads all of `words` once with every thread of `pool`, each summing its chunks. Returns
// the sum (so the reads cannot be optimised away).
uint64_t ParallelRead(const uint64_t* words, size_t count, kernels::ThreadPool& pool);

// Writes every word of `words` from `pool`'s threads, so pages land where the reads run.
void ParallelFill(uint64_t* words, size_t count, kernels::ThreadPool& pool);

struct BandwidthResult {
  size_t buffer_bytes = 0;
  int threads = 0;
  int repetitions = 0;
  double best_bytes_per_second = 0;    // The ceiling a roofline uses.
  double median_bytes_per_second = 0;
};

// Allocates `buffer_bytes` (choose it far larger than the last-level cache), touches it,
// then times `repetitions` full parallel reads.
BandwidthResult MeasureReadBandwidth(kernels::ThreadPool& pool, size_t buffer_bytes, int repetitions);

}  // namespace tessera::bench

#endif  // TESSERA_BENCHMARKS_ROOFLINE_MEMORY_BANDWIDTH_H_
