// gpu_bench: device ceilings (copy bandwidth, cuBLASLt BF16 GEMM rate), a Llama-3-8B
// shaped forward step through the CUDA backend (decode at several batch sizes, one long
// prefill), the attention candidates alone (attention_bench.h), and decode GEMVs with
// quantized weights, reported against those ceilings.
// Writes JSON to --out and a table to stdout.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "benchmarks/gpu/attention_bench.h"
#include "benchmarks/gpu/event_timer.h"
#include "benchmarks/gpu/fill_random.h"
#include "benchmarks/gpu/llama_step.h"
#include "benchmarks/gpu/quantized_gemv_bench.h"
#include "kernels/cuda/cublaslt_gemm.h"
#include "kernels/cuda/cuda_backend.h"
#include "nlohmann/json.hpp"

#ifndef TESSERA_BUILD_TYPE
#define TESSERA_BUILD_TYPE "unknown"
#endif

namespace tessera::bench {
namespace {

using Json = nlohmann::json;

constexpr char kUsage[] =
    "usage: gpu_bench [--out PATH] [--device N] [--layers N] [--batches 1,2,4,8,64,256]\n"
    "                 [--context N] [--prefill N] [--copy-mib N] [--gemm-size N] [--iters N]\n"
    "                 [--activations bf16|f32] [--compare-activations 0|1]\n"
    "                 [--kv-dtype bf16|f32] [--gemv-max-rows N] [--attention 0|1]\n"
    "                 [--attention-prefill LIST] [--attention-batches LIST]\n"
    "                 [--attention-contexts LIST]\n"
    "  --out PATH      write results as JSON to PATH (default: no file)\n"
    "  --device N      CUDA device (default 0)\n"
    "  --layers N      decoder layers of the Llama-3-8B shape (default 32)\n"
    "  --batches LIST  decode batch sizes (default 1,2,4,8,64,256)\n"
    "  --context N     tokens in each sequence's KV cache during decode (default 512)\n"
    "  --prefill N     prompt length of the prefill step, 0 to skip (default 2048)\n"
    "  --copy-mib N    size of the device-to-device copy (default 2048)\n"
    "  --gemm-size N   M = N = K of the BF16 GEMM ceiling (default 8192)\n"
    "  --iters N       timed iterations per measurement (default 5)\n"
    "  --activations D the CUDA backend's activation dtype, bf16 (the worker's default) or\n"
    "                  f32 (TESSERA_CUDA_ACTIVATIONS=f32)\n"
    "  --compare-activations 0|1  also time the decode steps under the other activation\n"
    "                  dtype (default 1)\n"
    "  --kv-dtype D    the KV cache's element type, bf16 (the worker's choice for BF16\n"
    "                  checkpoints) or f32 (default bf16)\n"
    "  --gemv-max-rows N  decode batches up to N take the GEMV kernel, larger ones\n"
    "                  cuBLASLt (0..8; default: the backend's)\n"
    "  --attention 0|1 the attention sweep: each candidate kernel alone on one Llama-3-8B\n"
    "                  layer (default 1)\n"
    "  --attention-prefill LIST   its prompt lengths (default 512,2048,8192,32768)\n"
    "  --attention-batches LIST   its decode batches (default 1,8,64,256)\n"
    "  --attention-contexts LIST  its decode contexts (default 512,4096,32768)\n";

struct Options {
  std::string out;
  int device = 0;
  int layers = 32;
  std::vector<int> batches = {1, 2, 4, 8, 64, 256};
  int context = 512;
  int prefill = 2048;
  int64_t copy_mib = 2048;
  int gemm_size = 8192;
  int iters = 5;
  DType activations = DType::kBF16;
  bool compare_activations = true;
  DType kv_dtype = DType::kBF16;
  int gemv_max_rows = -1;  // -1: the backend's default.
  bool attention = true;
  AttentionBenchOptions attention_options;
};

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "gpu_bench: %s\n", message.c_str());
  std::exit(1);
}

void Check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) Die(std::string(what) + ": " + cudaGetErrorString(err));
}

int ParseInt(const std::string& flag, const std::string& value, int min) {
  int v = 0;
  if (!absl::SimpleAtoi(value, &v) || v < min) {
    Die("invalid value '" + value + "' for " + flag + " (an integer >= " + std::to_string(min) +
        ")");
  }
  return v;
}

std::vector<int> ParseList(const std::string& flag, const std::string& value) {
  std::vector<int> out;
  for (const auto& part : absl::StrSplit(value, ',')) {
    out.push_back(ParseInt(flag, std::string(part), 1));
  }
  return out;
}

DType ParseBf16OrF32(const std::string& flag, const std::string& value) {
  if (value == "bf16") return DType::kBF16;
  if (value == "f32") return DType::kF32;
  Die("invalid value '" + value + "' for " + flag + " (bf16 or f32)");
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) Die("missing value for " + flag + "\n" + kUsage);
    const std::string value = argv[++i];
    if (flag == "--out") {
      o.out = value;
    } else if (flag == "--device") {
      o.device = ParseInt(flag, value, 0);
    } else if (flag == "--layers") {
      o.layers = ParseInt(flag, value, 1);
    } else if (flag == "--batches") {
      o.batches = ParseList(flag, value);
    } else if (flag == "--attention") {
      o.attention = ParseInt(flag, value, 0) != 0;
    } else if (flag == "--attention-prefill") {
      o.attention_options.prefill_tokens = ParseList(flag, value);
    } else if (flag == "--attention-batches") {
      o.attention_options.decode_batches = ParseList(flag, value);
    } else if (flag == "--attention-contexts") {
      o.attention_options.decode_contexts = ParseList(flag, value);
    } else if (flag == "--context") {
      o.context = ParseInt(flag, value, 1);
    } else if (flag == "--prefill") {
      o.prefill = ParseInt(flag, value, 0);
    } else if (flag == "--copy-mib") {
      o.copy_mib = ParseInt(flag, value, 1);
    } else if (flag == "--gemm-size") {
      o.gemm_size = ParseInt(flag, value, 16);
    } else if (flag == "--iters") {
      o.iters = ParseInt(flag, value, 1);
    } else if (flag == "--activations") {
      o.activations = ParseBf16OrF32(flag, value);
    } else if (flag == "--compare-activations") {
      o.compare_activations = ParseInt(flag, value, 0) != 0;
    } else if (flag == "--kv-dtype") {
      o.kv_dtype = ParseBf16OrF32(flag, value);
    } else if (flag == "--gemv-max-rows") {
      o.gemv_max_rows = ParseInt(flag, value, 0);
    } else {
      Die("unknown flag " + flag + "\n" + kUsage);
    }
  }
  return o;
}

// Milliseconds per call of `body` (enqueued on `stream`), after one warm-up call.
template <typename F>
double TimeMs(cudaStream_t stream, int iters, F body) {
  absl::StatusOr<double> ms = EventTimeMs(stream, 1, iters, body);
  if (!ms.ok()) Die(std::string(ms.status().message()));
  return *ms;
}

// Device-to-device copy: bytes read + written per second.
double CopyBandwidth(const Options& o, cudaStream_t stream) {
  const size_t bytes = static_cast<size_t>(o.copy_mib) << 20;
  void* a = nullptr;
  void* b = nullptr;
  Check(cudaMalloc(&a, bytes), "cudaMalloc for the copy source");
  Check(cudaMalloc(&b, bytes), "cudaMalloc for the copy destination");
  Check(cudaMemsetAsync(a, 1, bytes, stream), "cudaMemsetAsync");
  const double ms = TimeMs(stream, o.iters * 2, [&] {
    Check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
  });
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes / (ms * 1e-3);
}

// BF16 x BF16 -> F32 GEMM through the backend's cuBLASLt path: FLOP per second.
double GemmRate(const Options& o, cudaStream_t stream) {
  const int64_t n = o.gemm_size;
  auto gemm = kernels::CublasLtGemm::Create(size_t{32} << 20);
  if (!gemm.ok()) Die(std::string(gemm.status().message()));
  void* x = nullptr;
  void* w = nullptr;
  float* y = nullptr;
  Check(cudaMalloc(&x, n * n * 2), "cudaMalloc GEMM A");
  Check(cudaMalloc(&w, n * n * 2), "cudaMalloc GEMM B");
  Check(cudaMalloc(reinterpret_cast<void**>(&y), n * n * 4), "cudaMalloc GEMM C");
  FillRandom(x, n * n, DType::kBF16, 1.0f, 11, stream);
  FillRandom(w, n * n, DType::kBF16, 1.0f, 12, stream);
  const double ms = TimeMs(stream, o.iters, [&] {
    const absl::Status s =
        (*gemm)->Matmul(x, w, DType::kBF16, n, n, n, y, DType::kF32, stream);
    if (!s.ok()) Die(std::string(s.message()));
  });
  cudaFree(x);
  cudaFree(w);
  cudaFree(y);
  return 2.0 * n * n * n / (ms * 1e-3);
}

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return buf;
}

int Main(int argc, char** argv) {
  const Options o = ParseArgs(argc, argv);
  absl::StatusOr<std::unique_ptr<kernels::CudaBackend>> backend =
      kernels::MakeCudaBackend(o.device, o.activations);
  if (!backend.ok()) Die(std::string(backend.status().message()));
  kernels::CudaBackend& be = **backend;
  if (o.gemv_max_rows >= 0) be.set_gemv_max_rows(o.gemv_max_rows);
  cudaStream_t stream = be.stream();

  cudaDeviceProp prop{};
  Check(cudaGetDeviceProperties(&prop, o.device), "cudaGetDeviceProperties");
  int driver = 0;
  int runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  Json result;
  result["gpu"] = prop.name;
  result["compute_capability"] = std::to_string(prop.major) + "." + std::to_string(prop.minor);
  result["multiprocessors"] = prop.multiProcessorCount;
  result["memory_bytes"] = prop.totalGlobalMem;
  result["driver_version"] = driver;
  result["runtime_version"] = runtime;
  result["build_type"] = TESSERA_BUILD_TYPE;
  result["date"] = UtcNow();
  result["activation_dtype"] = DTypeName(o.activations);
  result["gemv_max_rows"] = be.gemv_max_rows();
  // Rewrites --out with what has been measured so far.
  auto save = [&]() {
    if (o.out.empty()) return;
    const std::filesystem::path path(o.out);
    if (path.has_parent_path()) {
      std::error_code ec;
      std::filesystem::create_directories(path.parent_path(), ec);
    }
    std::ofstream file(path);
    file << result.dump(2) << "\n";
    if (!file) Die("could not write " + o.out);
  };
  std::printf("GPU %s (sm_%d%d, %d SMs, %.1f GiB), driver %d, runtime %d, %s build, %s "
              "activations\n",
              prop.name, prop.major, prop.minor, prop.multiProcessorCount,
              prop.totalGlobalMem / double(1 << 30), driver, runtime, TESSERA_BUILD_TYPE,
              DTypeName(o.activations));
  std::printf("KV cache %s; BF16 weights take the GEMV kernel up to %d rows, cuBLASLt above\n",
              DTypeName(o.kv_dtype), be.gemv_max_rows());

  const double copy_bw = CopyBandwidth(o, stream);
  const double gemm_rate = GemmRate(o, stream);
  result["copy_bandwidth_bytes_per_s"] = copy_bw;
  result["copy_mib"] = o.copy_mib;
  result["gemm_bf16_flop_per_s"] = gemm_rate;
  result["gemm_size"] = o.gemm_size;
  std::printf("device copy (read+write): %8.1f GB/s\n", copy_bw / 1e9);
  std::printf("cuBLASLt BF16 GEMM %d^3:  %8.1f TFLOP/s\n\n", o.gemm_size, gemm_rate / 1e12);
  save();

  LlamaShape shape;
  shape.layers = o.layers;
  shape.kv_dtype = o.kv_dtype;
  int max_batch = 1;
  for (int b : o.batches) max_batch = std::max(max_batch, b);
  const int64_t cache_tokens =
      std::max<int64_t>(static_cast<int64_t>(max_batch) * (o.context + shape.block_size),
                        o.prefill + shape.block_size);
  absl::StatusOr<std::unique_ptr<LlamaStepBench>> model =
      LlamaStepBench::Create(&be, shape, cache_tokens);
  if (!model.ok()) Die(std::string(model.status().message()));
  const double weight_bytes = static_cast<double>(shape.StepWeightBytes());
  result["model"] = {{"hidden", shape.hidden},     {"intermediate", shape.inter},
                     {"q_heads", shape.q_heads},   {"kv_heads", shape.kv_heads},
                     {"head_dim", shape.head_dim}, {"layers", shape.layers},
                     {"vocab", shape.vocab},       {"weight_dtype", "BF16"},
                     {"kv_dtype", DTypeName(shape.kv_dtype)}, {"block_size", shape.block_size},
                     {"step_weight_bytes", shape.StepWeightBytes()}};

  std::printf("decode, context %d (weights %.2f GB per step)\n", o.context, weight_bytes / 1e9);
  std::printf("%6s %10s %10s %10s %12s %10s %10s %8s\n", "batch", "step ms", "gemm ms",
              "attn ms", "tokens/s", "wt GB/s", "of copy", "gemm of");
  Json decode = Json::array();
  for (int batch : o.batches) {
    absl::StatusOr<StepTiming> t = (*model)->Time(batch, o.context, 1, 2, o.iters);
    if (!t.ok()) Die(std::string(t.status().message()));
    const double step_bw = weight_bytes / (t->step_ms * 1e-3);
    const double gemm_bw = weight_bytes / (t->gemm_only_ms * 1e-3);
    const double kv_bytes = 2.0 * batch * o.context * shape.kv_heads * shape.head_dim *
                            static_cast<double>(DTypeSize(shape.kv_dtype)) * shape.layers;
    decode.push_back({{"batch", batch},
                      {"context", o.context},
                      {"step_ms", t->step_ms},
                      {"gemm_only_ms", t->gemm_only_ms},
                      {"attention_only_ms", t->attention_ms},
                      {"tokens_per_s", batch / (t->step_ms * 1e-3)},
                      {"weight_bytes_per_s", step_bw},
                      {"weight_fraction_of_copy_bw", step_bw / copy_bw},
                      {"gemm_only_weight_bytes_per_s", gemm_bw},
                      {"gemm_only_fraction_of_copy_bw", gemm_bw / copy_bw},
                      {"kv_bytes_per_step", kv_bytes},
                      {"attention_kv_bytes_per_s", kv_bytes / (t->attention_ms * 1e-3)}});
    std::printf("%6d %10.3f %10.3f %10.3f %12.1f %10.1f %9.1f%% %7.1f%%\n", batch, t->step_ms,
                t->gemm_only_ms, t->attention_ms, batch / (t->step_ms * 1e-3), step_bw / 1e9,
                100.0 * step_bw / copy_bw, 100.0 * gemm_bw / copy_bw);
  }
  result["decode"] = decode;
  save();

  if (o.compare_activations) {
    // The same weights and caches under the other activation dtype: what BF16 activations
    // save per decode step (activation and all-reduce bytes; the weights are the same).
    const DType other_dtype = o.activations == DType::kBF16 ? DType::kF32 : DType::kBF16;
    absl::StatusOr<std::unique_ptr<kernels::CudaBackend>> other =
        kernels::MakeCudaBackend(o.device, other_dtype);
    if (!other.ok()) Die(std::string(other.status().message()));
    (*model)->set_backend(other->get());
    std::printf("\ndecode with %s activations\n%6s %10s %12s\n", DTypeName(other_dtype),
                "batch", "step ms", "tokens/s");
    Json rows = Json::array();
    for (int batch : o.batches) {
      absl::StatusOr<StepTiming> t = (*model)->Time(batch, o.context, 1, 2, o.iters);
      if (!t.ok()) Die(std::string(t.status().message()));
      rows.push_back({{"batch", batch},
                      {"step_ms", t->step_ms},
                      {"tokens_per_s", batch / (t->step_ms * 1e-3)}});
      std::printf("%6d %10.3f %12.1f\n", batch, t->step_ms, batch / (t->step_ms * 1e-3));
    }
    (*model)->set_backend(&be);
    result["decode_other_activations"] = {{"activation_dtype", DTypeName(other_dtype)},
                                          {"decode", rows}};
  }

  absl::StatusOr<Json> quantized = RunQuantizedGemvBench(be, o.iters, copy_bw);
  if (!quantized.ok()) Die(std::string(quantized.status().message()));
  result["quantized_gemv"] = *std::move(quantized);
  result["hbm_peak_bytes_per_s"] = HbmPeakBytesPerSecond(o.device);
  if (o.prefill > 0) {
    absl::StatusOr<Json> prefill = RunQuantizedPrefillBench(be, o.prefill, o.iters, gemm_rate);
    if (!prefill.ok()) Die(std::string(prefill.status().message()));
    result["quantized_prefill"] = *std::move(prefill);
  }

  // The new attention kernels last (issue 33: not yet run on a GPU when written), each
  // section saved as it ends: a kernel that faults leaves the figures before it.
  save();
  if (o.prefill > 0) {
    absl::StatusOr<StepTiming> t = (*model)->Time(1, o.prefill, o.prefill, 1, o.iters);
    if (!t.ok()) Die(std::string(t.status().message()));
    // lm_head runs on the last token only.
    const double lm_params = static_cast<double>(shape.vocab) * shape.hidden;
    const double layer_params = static_cast<double>(shape.LayerMatmulParams()) - lm_params;
    const double gemm_flop = 2.0 * o.prefill * layer_params + 2.0 * lm_params;
    // The kernel PagedAttention took (the step plans its prefill as the worker does).
    const char* attention_kernel = shape.kv_dtype == DType::kF32 ? "FP32 SIMT kernel, F32 cache"
                                   : be.sm90_prefill_available() && o.activations == DType::kBF16
                                       ? "FlashInfer sm_90 kernel, BF16 cache"
                                       : "tensor-core kernel, BF16 cache";
    // QK^T and PV over the causal triangle.
    const double attn_flop = 4.0 * shape.head_dim * shape.q_heads * shape.layers *
                             (static_cast<double>(o.prefill) * (o.prefill + 1) / 2.0);
    const double gemm_rate_step = gemm_flop / (t->gemm_only_ms * 1e-3);
    result["prefill"] = {{"tokens", o.prefill},
                         {"step_ms", t->step_ms},
                         {"gemm_only_ms", t->gemm_only_ms},
                         {"attention_only_ms", t->attention_ms},
                         {"gemm_flop", gemm_flop},
                         {"attention_flop", attn_flop},
                         {"tokens_per_s", o.prefill / (t->step_ms * 1e-3)},
                         {"flop_per_s", (gemm_flop + attn_flop) / (t->step_ms * 1e-3)},
                         {"gemm_flop_per_s", gemm_rate_step},
                         {"gemm_fraction_of_gemm_rate", gemm_rate_step / gemm_rate},
                         {"attention_flop_per_s", attn_flop / (t->attention_ms * 1e-3)},
                         {"attention_kernel", attention_kernel}};
    std::printf("\nprefill %d tokens: step %.1f ms (%.0f tokens/s, %.1f TFLOP/s overall)\n",
                o.prefill, t->step_ms, o.prefill / (t->step_ms * 1e-3),
                (gemm_flop + attn_flop) / (t->step_ms * 1e-3) / 1e12);
    std::printf("  GEMMs alone %.1f ms = %.1f TFLOP/s, %.1f%% of the measured GEMM rate\n",
                t->gemm_only_ms, gemm_rate_step / 1e12, 100.0 * gemm_rate_step / gemm_rate);
    std::printf("  attention alone %.1f ms = %.1f TFLOP/s (%s)\n", t->attention_ms,
                attn_flop / (t->attention_ms * 1e-3) / 1e12, attention_kernel);
  }
  save();
  model->reset();

  if (o.attention) {
    AttentionBenchOptions attention = o.attention_options;
    attention.iters = o.iters;
    absl::StatusOr<Json> sweep = RunAttentionBench(be, attention, copy_bw);
    if (!sweep.ok()) Die(std::string(sweep.status().message()));
    result["attention"] = *std::move(sweep);
  }

  save();
  if (!o.out.empty()) std::printf("\nresults written to %s\n", o.out.c_str());
  return 0;
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) { return tessera::bench::Main(argc, argv); }
