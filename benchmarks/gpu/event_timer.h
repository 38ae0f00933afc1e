#ifndef TESSERA_BENCHMARKS_GPU_EVENT_TIMER_H_
#define TESSERA_BENCHMARKS_GPU_EVENT_TIMER_H_

#include <cuda_runtime.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera::bench {

// Milliseconds per call of `body` (work enqueued on `stream`): `warmup` untimed calls, then
// CUDA events around `iters` calls. An error of the event calls themselves is returned.
template <typename F>
absl::StatusOr<double> EventTimeMs(cudaStream_t stream, int warmup, int iters, F&& body) {
  for (int i = 0; i < warmup; ++i) body();
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  auto fail = [&](cudaError_t e, const char* what) {
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
    return absl::InternalError(std::string(what) + ": " + cudaGetErrorString(e));
  };
  if (cudaError_t e = cudaEventCreate(&start); e != cudaSuccess) return fail(e, "cudaEventCreate");
  if (cudaError_t e = cudaEventCreate(&stop); e != cudaSuccess) return fail(e, "cudaEventCreate");
  if (cudaError_t e = cudaEventRecord(start, stream); e != cudaSuccess) {
    return fail(e, "cudaEventRecord");
  }
  for (int i = 0; i < iters; ++i) body();
  if (cudaError_t e = cudaEventRecord(stop, stream); e != cudaSuccess) {
    return fail(e, "cudaEventRecord");
  }
  if (cudaError_t e = cudaEventSynchronize(stop); e != cudaSuccess) {
    return fail(e, "cudaEventSynchronize");
  }
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return static_cast<double>(ms) / iters;
}

}  // namespace tessera::bench

#endif  // TESSERA_BENCHMARKS_GPU_EVENT_TIMER_H_
