#include "benchmarks/gpu/quantized_gemv_bench.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "benchmarks/gpu/fill_random.h"
#include "common/dtype.h"

namespace tessera::bench {
namespace {

struct LayerShape {
  const char* model;
  int64_t hidden;
  int64_t inter;
  int64_t qkv_rows;
};

// Llama-3.2-1B: 32 q heads and 8 KV heads of 64; Llama-3-8B: 32 and 8 of 128.
constexpr LayerShape kShapes[] = {{"llama-3.2-1b", 2048, 8192, (32 + 16) * 64},
                                  {"llama-3-8b", 4096, 14336, (32 + 16) * 128}};
constexpr int kGroup = 128;
// Rotated copies of a layer cover at least this many bytes: four times H200's 50 MB L2.
constexpr double kRotationBytes = 200e6;

// One quantized (or BF16) matrix in one device allocation.
struct DeviceWeight {
  void* data = nullptr;
  float* scales = nullptr;
  float* zeros = nullptr;
  kernels::MatrixView view;
  double bytes = 0;  // What a GEMV must read: codes, scales, zeros.
};

absl::Status CudaOk(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

absl::StatusOr<DeviceWeight> MakeWeight(DType dtype, int64_t rows, int64_t cols, uint64_t seed,
                                        cudaStream_t stream) {
  DeviceWeight w;
  const size_t code_bytes = dtype == DType::kBF16 ? rows * cols * 2
                            : dtype == DType::kU4 ? rows * cols / 2
                                                  : rows * cols;
  const size_t table = dtype == DType::kU4 ? rows * (cols / kGroup)
                       : dtype == DType::kBF16 ? 0
                                               : rows;
  if (absl::Status s = CudaOk(cudaMalloc(&w.data, code_bytes), "cudaMalloc weights"); !s.ok()) {
    return s;
  }
  // Random 16-bit patterns are random bytes for the quantized codes (FP8 NaN codes cost the
  // same to decode); 1/64-scaled floats for the scales.
  if (!FillRandom(w.data, code_bytes / 2, DType::kBF16, 1.0f, seed, stream)) {
    return absl::InternalError("FillRandom of weight codes failed");
  }
  w.bytes = static_cast<double>(code_bytes);
  if (table > 0) {
    const int tables = dtype == DType::kU4 ? 2 : 1;
    if (absl::Status s = CudaOk(cudaMalloc(&w.scales, tables * table * sizeof(float)),
                                "cudaMalloc scales");
        !s.ok()) {
      return s;
    }
    if (!FillRandom(w.scales, tables * table, DType::kF32, 1.0f / 64, seed + 1, stream)) {
      return absl::InternalError("FillRandom of scales failed");
    }
    if (tables == 2) w.zeros = w.scales + table;
    w.bytes += static_cast<double>(tables * table * sizeof(float));
  }
  w.view = kernels::MatrixView{w.data, dtype, rows, cols, w.scales,
                               dtype == DType::kU4 ? kGroup : 0, w.zeros};
  return w;
}

void FreeWeight(DeviceWeight& w) {
  cudaFree(w.data);
  cudaFree(w.scales);  // The zeros share the allocation.
  w = DeviceWeight{};
}

}  // namespace

double HbmPeakBytesPerSecond(int device) {
  int clock_khz = 0;
  int bus_bits = 0;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) !=
          cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return 2.0 * clock_khz * 1e3 * bus_bits / 8.0;
}

absl::StatusOr<nlohmann::json> RunQuantizedGemvBench(kernels::CudaBackend& backend, int iters,
                                                     double copy_bytes_per_s) {
  cudaStream_t stream = backend.stream();
  const double peak = HbmPeakBytesPerSecond(backend.device());
  nlohmann::json out = nlohmann::json::array();
  std::printf("\nquantized decode GEMV, one decoder layer (qkv, o, gate_up, down); HBM peak "
              "%.0f GB/s\n", peak / 1e9);
  std::printf("%-14s %-8s %-8s %3s %10s %10s %10s %8s %8s\n", "model", "weights", "path", "m",
              "layer MB", "layer us", "GB/s", "of peak", "of copy");
  float* x = nullptr;
  float* y = nullptr;
  const int max_m = 8;
  const int64_t max_dim = 14336;
  const int64_t max_rows = 2 * 14336;
  if (absl::Status s = CudaOk(cudaMalloc(&x, max_m * max_dim * sizeof(float)), "cudaMalloc x");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CudaOk(cudaMalloc(&y, max_m * max_rows * sizeof(float)), "cudaMalloc y");
      !s.ok()) {
    cudaFree(x);
    return s;
  }
  // Activations in the backend's dtype (sized for float32, enough for either).
  FillRandom(x, max_m * max_dim, backend.activation_dtype(), 1.0f, 99, stream);

  absl::Status status;
  for (const LayerShape& shape : kShapes) {
    for (DType dtype : {DType::kBF16, DType::kI8, DType::kF8E4M3, DType::kU4}) {
      const int64_t h = shape.hidden;
      const int64_t dims[4][2] = {{shape.qkv_rows, h}, {h, h}, {2 * shape.inter, h},
                                  {h, shape.inter}};
      std::vector<std::vector<DeviceWeight>> copies;
      double layer_bytes = 0;
      do {
        std::vector<DeviceWeight> layer;
        layer_bytes = 0;
        for (const auto& d : dims) {
          absl::StatusOr<DeviceWeight> w =
              MakeWeight(dtype, d[0], d[1], 1000 * copies.size() + layer.size(), stream);
          if (!w.ok()) {
            status = w.status();
            break;
          }
          layer_bytes += w->bytes;
          layer.push_back(*w);
        }
        copies.push_back(std::move(layer));
      } while (status.ok() && copies.size() * layer_bytes < kRotationBytes && copies.size() < 64);
      // BF16 twice, through the GEMV kernel and through cuBLASLt, at every decode row count:
      // where the dispatch (CudaBackend::set_gemv_max_rows) should switch.
      struct Run {
        int m;
        bool cublas;
      };
      std::vector<Run> runs;
      if (dtype == DType::kBF16) {
        for (bool cublas : {false, true}) {
          for (int m = 1; m <= max_m; ++m) runs.push_back({m, cublas});
        }
      } else {
        for (int m : {1, 4, 8}) runs.push_back({m, false});
      }
      const int default_gemv_rows = backend.gemv_max_rows();
      for (const Run& run : runs) {
        if (!status.ok()) break;
        const int m = run.m;
        backend.set_gemv_max_rows(run.cublas ? 0 : max_m);
        const char* path = dtype != DType::kBF16 ? "gemv" : run.cublas ? "cublaslt" : "gemv";
        auto run_layer = [&](size_t copy) {
          for (const DeviceWeight& w : copies[copy]) backend.Gemm(x, m, w.view, y);
        };
        run_layer(0);  // Warm-up.
        cudaEvent_t start, stop;
        cudaEventCreate(&start);
        cudaEventCreate(&stop);
        const int calls = std::max<int>(iters, 1) * static_cast<int>(copies.size());
        cudaEventRecord(start, stream);
        for (int i = 0; i < calls; ++i) run_layer(i % copies.size());
        cudaEventRecord(stop, stream);
        cudaEventSynchronize(stop);
        float ms = 0;
        cudaEventElapsedTime(&ms, start, stop);
        cudaEventDestroy(start);
        cudaEventDestroy(stop);
        if (!backend.status().ok()) {
          status = backend.status();
          break;
        }
        const double layer_s = ms * 1e-3 / calls;
        const double bw = layer_bytes / layer_s;
        out.push_back({{"model", shape.model},
                       {"weight_dtype", DTypeName(dtype)},
                       {"path", path},
                       {"group_size", dtype == DType::kU4 ? kGroup : 0},
                       {"m", m},
                       {"layer_weight_bytes", layer_bytes},
                       {"layer_us", layer_s * 1e6},
                       {"weight_bytes_per_s", bw},
                       {"fraction_of_hbm_peak", peak > 0 ? bw / peak : 0.0},
                       {"fraction_of_copy_bw", bw / copy_bytes_per_s}});
        std::printf("%-14s %-8s %-8s %3d %10.1f %10.1f %10.1f %7.1f%% %7.1f%%\n", shape.model,
                    DTypeName(dtype), path, m, layer_bytes / 1e6, layer_s * 1e6, bw / 1e9,
                    peak > 0 ? 100.0 * bw / peak : 0.0, 100.0 * bw / copy_bytes_per_s);
      }
      backend.set_gemv_max_rows(default_gemv_rows);
      for (auto& layer : copies) {
        for (DeviceWeight& w : layer) FreeWeight(w);
      }
      if (!status.ok()) break;
    }
    if (!status.ok()) break;
  }
  cudaFree(x);
  cudaFree(y);
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<nlohmann::json> RunQuantizedPrefillBench(kernels::CudaBackend& backend,
                                                        int tokens, int iters,
                                                        double bf16_gemm_flop_per_s) {
  cudaStream_t stream = backend.stream();
  const LayerShape& shape = kShapes[1];  // Llama-3-8B.
  const int64_t h = shape.hidden;
  const int64_t dims[4][2] = {{shape.qkv_rows, h}, {h, h}, {2 * shape.inter, h},
                              {h, shape.inter}};
  double layer_flop = 0;
  for (const auto& d : dims) layer_flop += 2.0 * tokens * d[0] * d[1];
  std::printf("\nquantized prefill GEMM, %s layer, m = %d\n", shape.model, tokens);
  std::printf("%-14s %10s %10s %10s\n", "weights", "layer ms", "TFLOP/s", "of BF16");
  float* x = nullptr;
  float* y = nullptr;
  const int64_t max_k = shape.inter;
  const int64_t max_n = 2 * shape.inter;
  if (absl::Status s = CudaOk(cudaMalloc(&x, tokens * max_k * sizeof(float)), "cudaMalloc x");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CudaOk(cudaMalloc(&y, tokens * max_n * sizeof(float)), "cudaMalloc y");
      !s.ok()) {
    cudaFree(x);
    return s;
  }
  FillRandom(x, tokens * max_k, backend.activation_dtype(), 1.0f, 98, stream);
  nlohmann::json out = nlohmann::json::array();
  absl::Status status;
  struct Variant {
    DType dtype;
    bool fp8_activations;
    const char* name;
  };
  for (const Variant& v : {Variant{DType::kBF16, false, "BF16"}, Variant{DType::kI8, false, "I8"},
                           Variant{DType::kF8E4M3, false, "F8_E4M3"},
                           Variant{DType::kU4, false, "U4 g128"},
                           Variant{DType::kF8E4M3, true, "F8 x F8"}}) {
    if (v.fp8_activations && !backend.fp8_tensor_cores()) continue;
    std::vector<DeviceWeight> layer;
    for (const auto& d : dims) {
      absl::StatusOr<DeviceWeight> w = MakeWeight(v.dtype, d[0], d[1], 77 + layer.size(), stream);
      if (!w.ok()) {
        status = w.status();
        break;
      }
      layer.push_back(*w);
    }
    if (status.ok()) {
      backend.set_fp8_activations(v.fp8_activations);
      const int64_t fp8_before = backend.fp8_gemms();
      auto run_layer = [&] {
        for (const DeviceWeight& w : layer) backend.Gemm(x, tokens, w.view, y);
      };
      run_layer();  // Warm-up: scratch buffers, cuBLASLt plans.
      cudaEvent_t start, stop;
      cudaEventCreate(&start);
      cudaEventCreate(&stop);
      cudaEventRecord(start, stream);
      for (int i = 0; i < iters; ++i) run_layer();
      cudaEventRecord(stop, stream);
      cudaEventSynchronize(stop);
      float ms = 0;
      cudaEventElapsedTime(&ms, start, stop);
      cudaEventDestroy(start);
      cudaEventDestroy(stop);
      backend.set_fp8_activations(false);
      if (!backend.status().ok()) {
        status = backend.status();
      } else {
        const double layer_ms = ms / iters;
        const double rate = layer_flop / (layer_ms * 1e-3);
        // Whether every FP8 x FP8 GEMM really ran on the FP8 path (else it fell back).
        const bool fp8_ran = backend.fp8_gemms() - fp8_before == 4 * (iters + 1);
        out.push_back({{"model", shape.model},
                       {"weights", v.name},
                       {"m", tokens},
                       {"layer_ms", layer_ms},
                       {"flop_per_s", rate},
                       {"fraction_of_bf16_gemm_rate", rate / bf16_gemm_flop_per_s},
                       {"fp8_tensor_core_path", v.fp8_activations && fp8_ran}});
        std::printf("%-14s %10.3f %10.1f %9.1f%%%s\n", v.name, layer_ms, rate / 1e12,
                    100.0 * rate / bf16_gemm_flop_per_s,
                    v.fp8_activations && !fp8_ran ? "  (fell back to BF16)" : "");
      }
    }
    for (DeviceWeight& w : layer) FreeWeight(w);
    if (!status.ok()) break;
  }
  cudaFree(x);
  cudaFree(y);
  if (!status.ok()) return status;
  return out;
}

}  // namespace tessera::bench
