#ifndef TESSERA_BENCHMARKS_GPU_ATTENTION_BENCH_H_
#define TESSERA_BENCHMARKS_GPU_ATTENTION_BENCH_H_

#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/cuda_backend.h"
#include "nlohmann/json.hpp"

// The attention sweep of issue 33: one Llama-3-8B attention layer (32 query heads over 8 KV
// heads, head_dim 128, BF16 activations and a paged BF16 cache of 16-token blocks), each
// candidate kernel timed alone on the same inputs.
//   prefill: one causal prompt of N tokens; FLOP/s over the causal triangle
//            (4 * head_dim * q_heads * N(N+1)/2). Candidates: Tessera's tensor-core kernel,
//            FlashInfer's sm_90 kernel through the backend's plan (Hopper), cuDNN's SDPA
//            with paged K/V (where libcudnn loads).
//   decode:  B sequences of one new token over C cached tokens each; KV bytes read per second
//            (B * C * 2 * kv_heads * head_dim * 2 bytes) and that as a fraction of the measured
//            copy bandwidth. Candidates: the backend's split-KV path (its planner) and the
//            previous split-K kernel.
// Points whose buffers would not fit in 40 % of the free memory are recorded as skipped.
namespace tessera::bench {

struct AttentionBenchOptions {
  std::vector<int> prefill_tokens = {512, 2048, 8192, 32768};
  std::vector<int> decode_batches = {1, 8, 64, 256};
  std::vector<int> decode_contexts = {512, 4096, 32768};
  int iters = 5;
};

absl::StatusOr<nlohmann::json> RunAttentionBench(kernels::CudaBackend& backend,
                                                 const AttentionBenchOptions& options,
                                                 double copy_bytes_per_s);

}  // namespace tessera::bench

#endif  // TESSERA_BENCHMARKS_GPU_ATTENTION_BENCH_H_
