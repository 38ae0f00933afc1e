#ifndef TESSERA_BENCHMARKS_GPU_QUANTIZED_GEMV_BENCH_H_
#define TESSERA_BENCHMARKS_GPU_QUANTIZED_GEMV_BENCH_H_

#include "absl/status/statusor.h"
#include "kernels/cuda/cuda_backend.h"
#include "nlohmann/json.hpp"

// Decode-sized GEMMs (m = 1, 4, 8) through the CUDA backend with BF16, int8, FP8 E4M3 and
// int4 (group 128) weights, at the four linear layers of one Llama-3.2-1B and one
// Llama-3-8B decoder layer (qkv, o, gate_up, down). Decode streams the weights, so each
// row reports the weight bytes read per second (codes plus scales and zeros) and that as a
// fraction of the HBM peak (from the device's memory clock and bus width) and of the
// measured copy bandwidth. Enough copies of the layer rotate that none is still in L2.
namespace tessera::bench {

// Prints a table and returns one JSON object per (model, dtype, m).
absl::StatusOr<nlohmann::json> RunQuantizedGemvBench(kernels::CudaBackend& backend, int iters,
                                                     double copy_bytes_per_s);

// Prefill-sized GEMMs (m = `tokens`) at one Llama-3-8B layer's four matrices with BF16, int8,
// FP8 and int4 weights (widened to BF16 in scratch, then cuBLASLt) and FP8 weights x FP8
// activations (the tensor-core path, where the device has one): FLOP per second and the
// fraction of `bf16_gemm_flop_per_s`. Prints a table, returns one JSON object per row.
absl::StatusOr<nlohmann::json> RunQuantizedPrefillBench(kernels::CudaBackend& backend,
                                                        int tokens, int iters,
                                                        double bf16_gemm_flop_per_s);

// 2 * memory clock * bus width / 8 (DDR), or 0 when the device does not report them.
double HbmPeakBytesPerSecond(int device);

}  // namespace tessera::bench

#endif  // TESSERA_BENCHMARKS_GPU_QUANTIZED_GEMV_BENCH_H_
