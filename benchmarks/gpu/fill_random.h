#ifndef TESSERA_BENCHMARKS_GPU_FILL_RANDOM_H_
#define TESSERA_BENCHMARKS_GPU_FILL_RANDOM_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"

namespace tessera::bench {

// Fills `n` elements of `dtype` at `dst` with uniform values in [-scale, scale) from a
// counter-based hash of (seed, index): fast, on device, reproducible. False on a launch error.
bool FillRandom(void* dst, size_t n, DType dtype, float scale, uint64_t seed,
                cudaStream_t stream);

}  // namespace tessera::bench

#endif  // TESSERA_BENCHMARKS_GPU_FILL_RANDOM_H_
