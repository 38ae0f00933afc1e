// tessera-roofline: how close batch decode on the CPU backend comes to the memory roofline.
// Measures the machine's read bandwidth, computes the bytes one decode step must move
// (benchmarks/roofline/decode_traffic.h), and times real decode steps of LlamaModel.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "benchmarks/roofline/decode_traffic.h"
#include "benchmarks/roofline/memory_bandwidth.h"
#include "benchmarks/roofline/timing_backend.h"
#include "benchmarks/serving/machine_info.h"
#include "benchmarks/serving/result.h"
#include "common/checkpoint.h"
#include "common/flag_set.h"
#include "common/progress_line.h"
#include "kernels/backend.h"
#include "kernels/cpu/thread_pool.h"
#include "nlohmann/json.hpp"
#include "worker/communicator.h"
#include "worker/llama_model.h"

namespace tessera::bench {
namespace {

using Json = nlohmann::json;

int Fail(const std::string& message) {
  std::fprintf(stderr, "tessera-roofline: %s\n", message.c_str());
  return 1;
}

int ThreadsOrCores(int64_t threads) {
  if (threads > 0) return static_cast<int>(threads);
  return std::max(1, ProbeMachine().usable_cores);
}

// The weight dtype as stored: the loader keeps the checkpoint's dtype for matrices.
absl::StatusOr<DType> WeightDType(const std::filesystem::path& dir) {
  auto checkpoint = Checkpoint::Open(dir);
  if (!checkpoint.ok()) return checkpoint.status();
  // Every family has this one (a mixture of experts may have no dense MLP at all).
  auto info = (*checkpoint)->Info("model.layers.0.self_attn.o_proj.weight");
  if (!info.ok()) return info.status();
  return (*info)->dtype;
}

// One decode token for each of `batch` sequences whose cache ends up holding `context`
// tokens; sequence s owns consecutive blocks after block 0.
StepBatch DecodeBatch(int batch, int context, int block_size, int vocab) {
  StepBatch b;
  const int blocks = (context + block_size - 1) / block_size;
  b.max_blocks_per_seq = blocks;
  b.query_start.push_back(0);
  for (int s = 0; s < batch; ++s) {
    const int first_block = 1 + s * blocks;
    for (int j = 0; j < blocks; ++j) b.block_tables.push_back(first_block + j);
    const int pos = context - 1;
    b.token_ids.push_back(3 + s % std::max(1, vocab - 3));
    b.positions.push_back(pos);
    b.slot_mapping.push_back(static_cast<int64_t>(first_block + pos / block_size) * block_size +
                             pos % block_size);
    b.context_lens.push_back(context);
    b.query_start.push_back(s + 1);
    b.logits_rows.push_back(s);
  }
  return b;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// A readable name for a GEMM of the model, from its weight shape.
std::string GemmName(const std::string& key, const ModelConfig& c, const ShardLayout& l) {
  const int64_t h = c.hidden_size, hd = c.head_dim;
  const int64_t nq = l.q_heads.size(), nkv = l.kv_heads.size(), inter = l.intermediate.size();
  auto is = [&](int64_t rows, int64_t cols) {
    return key.rfind(absl::StrCat("gemm ", rows, "x", cols, " "), 0) == 0;
  };
  if (is((nq + 2 * nkv) * hd, h)) return "gemm qkv";
  if (is(h, nq * hd)) return "gemm o";
  if (is(2 * inter, h)) return "gemm gate_up";
  if (is(h, inter)) return "gemm down";
  if (is(l.vocab.size(), h)) return "gemm lm_head";
  return key;
}

int Main(int argc, char** argv) {
  std::string model_dir, out;
  int64_t batch = 1, tokens = 128, steps = 8, warmup_steps = 2, threads = 0;
  int64_t bandwidth_mib = 1024, bandwidth_reps = 5;
  bool breakdown = true;
  FlagSet flags("tessera-roofline",
                "Measures memory read bandwidth, computes the bytes a decode step of --batch\n"
                "sequences at --tokens of context must move (weights of every matrix, embedding\n"
                "rows, KV reads), and times real decode steps of the model on the CPU backend\n"
                "(one rank). Prints the roofline fraction: theoretical / measured step time.");
  flags.String("model", &model_dir, "Model: a Hugging Face folder or a .gguf file.");
  flags.Int("batch", &batch, "Sequences decoded per step.");
  flags.Int("tokens", &tokens, "KV context per sequence after the step.");
  flags.Int("steps", &steps, "Measured decode steps.");
  flags.Int("warmup-steps", &warmup_steps, "Decode steps before measuring.");
  flags.Int("threads", &threads, "CPU threads (0: every usable core).");
  flags.Int("bandwidth-mib", &bandwidth_mib, "Buffer of the bandwidth measurement in MiB (>> LLC).");
  flags.Int("bandwidth-reps", &bandwidth_reps, "Reads of that buffer before loading; the best read (these or\nthe ones after each step) is the ceiling.");
  flags.Bool("breakdown", &breakdown, "Also time each op over as many steps (--breakdown=false: skip).");
  flags.String("out", &out, "Write the JSON result here.");
  std::string quantization = "none", kv_cache_dtype = "auto";
  flags.String("quantization", &quantization, "Weights quantized at load time: none, int8 or fp8.");
  flags.String("kv-cache-dtype", &kv_cache_dtype, "KV-cache element type: auto, bf16, fp8 or fp32.");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) return Fail(std::string(s.message()));
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (model_dir.empty()) return Fail("--model is required");
  if (batch <= 0 || tokens <= 0 || steps <= 0 || warmup_steps < 0 || bandwidth_mib <= 0) {
    return Fail(absl::StrCat("--batch, --tokens, --steps, --bandwidth-mib must be positive (got ",
                             batch, ", ", tokens, ", ", steps, ", ", bandwidth_mib, ")"));
  }
  const int num_threads = ThreadsOrCores(threads);

  // 1. The ceiling, before the model occupies memory. The buffer stays: one more read after
  // each measured step pairs every step with a bandwidth sample taken under the same load
  // (on a shared machine the ceiling moves with everyone else's work).
  kernels::ThreadPool bw_pool(num_threads);
  const size_t bw_words = (static_cast<size_t>(bandwidth_mib) << 20) / sizeof(uint64_t);
  const BandwidthResult bw =
      MeasureReadBandwidth(bw_pool, bw_words * sizeof(uint64_t), static_cast<int>(bandwidth_reps));
  std::unique_ptr<uint64_t[]> bw_buffer(new uint64_t[bw_words]);
  ParallelFill(bw_buffer.get(), bw_words, bw_pool);
  std::fprintf(stderr, "tessera-roofline: read bandwidth %.2f GB/s best, %.2f GB/s median (%d threads, %lld MiB)\n",
               bw.best_bytes_per_second / 1e9, bw.median_bytes_per_second / 1e9, bw.threads,
               static_cast<long long>(bandwidth_mib));

  // 2. The model, through the timing decorator (off while measuring plain steps).
  auto dtype = WeightDType(model_dir);
  if (!dtype.ok()) return Fail(std::string(dtype.status().message()));
  ModelLoadOptions load_options;
  if (auto q = ParseWeightQuantization(quantization); q.ok()) {
    load_options.quantization = *q;
  } else {
    return Fail(absl::StrCat("--quantization: ", q.status().message()));
  }
  if (auto d = ParseKvCacheDType(kv_cache_dtype); d.ok()) {
    load_options.kv_cache_dtype = *d;
  } else {
    return Fail(absl::StrCat("--kv-cache-dtype: ", d.status().message()));
  }
  std::unique_ptr<kernels::Backend> cpu = kernels::MakeCpuBackend(num_threads);
  TimingBackend backend(cpu.get());
  SingleRankCommunicator comm;
  ProgressLine progress("loading " + model_dir);
  auto model = LlamaModel::Load(model_dir, &backend, &comm, [&](int done, int total, uint64_t bytes) {
    progress.Update(done, total, absl::StrFormat("(%.1f MB)", bytes / 1e6));
  }, load_options);
  if (!model.ok()) return Fail(std::string(model.status().message()));
  const ModelConfig& config = (*model)->config();
  if (tokens > config.max_position_embeddings) {
    return Fail(absl::StrCat("--tokens ", tokens, " exceeds the model's context of ",
                             config.max_position_embeddings));
  }
  const int block_size = 16;
  const int blocks_per_seq = static_cast<int>((tokens + block_size - 1) / block_size);
  auto cache = (*model)->CreateKvCache(static_cast<int>(batch) * blocks_per_seq + 1, block_size);
  if (!cache.ok()) return Fail(std::string(cache.status().message()));
  {
    // Zeroed K/V: attention reads real memory (no untouched pages, no denormal garbage).
    const size_t bytes = (*cache)->shape().bytes();
    std::vector<char> zeros(bytes, 0);
    for (int l = 0; l < (*cache)->num_layers(); ++l) {
      cpu->CopyToDevice((*cache)->k(l), zeros.data(), bytes);
      cpu->CopyToDevice((*cache)->v(l), zeros.data(), bytes);
    }
  }
  const StepBatch step = DecodeBatch(static_cast<int>(batch), static_cast<int>(tokens), block_size,
                                     config.vocab_size);
  std::vector<float> logits;
  std::vector<double> paired_bw;  // Bytes/s of a full buffer read right after each measured step.
  auto run_steps = [&](int64_t n, std::vector<double>* times) -> absl::Status {
    for (int64_t i = 0; i < n; ++i) {
      auto start = std::chrono::steady_clock::now();
      if (absl::Status s = (*model)->Forward(step, cache->get(), &logits); !s.ok()) return s;
      if (times == nullptr) continue;
      times->push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      start = std::chrono::steady_clock::now();
      volatile uint64_t sink = ParallelRead(bw_buffer.get(), bw_words, bw_pool);
      (void)sink;
      paired_bw.push_back(bw_words * sizeof(uint64_t) /
                          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    return absl::OkStatus();
  };
  if (absl::Status s = run_steps(warmup_steps, nullptr); !s.ok()) return Fail(std::string(s.message()));
  // The same step every time, so the same experts: one step's routed bytes stand for all.
  backend.set_count_routed_experts(true);
  if (absl::Status s = run_steps(1, nullptr); !s.ok()) return Fail(std::string(s.message()));
  backend.set_count_routed_experts(false);
  const uint64_t routed_expert_bytes = backend.TakeRoutedExpertBytes();
  std::vector<double> times;
  if (absl::Status s = run_steps(steps, &times); !s.ok()) return Fail(std::string(s.message()));
  const std::vector<double> step_bw = paired_bw;
  std::vector<double> breakdown_times;
  if (breakdown) {
    backend.set_enabled(true);
    if (absl::Status s = run_steps(steps, &breakdown_times); !s.ok()) return Fail(std::string(s.message()));
    backend.set_enabled(false);
  }

  // 3. The roofline.
  DecodeTraffic traffic = ComputeDecodeTraffic(config, (*model)->layout(), *dtype,
                                               static_cast<int>(batch), static_cast<int>(tokens),
                                               (*model)->kv_cache_dtype());
  // Quantized layers stream one byte per weight, plus int8's BF16 scale per 32 columns
  // (1/16 more; FP8's float per row is negligible); embedding and lm_head keep the file's
  // type.
  if (load_options.quantization != WeightQuantization::kNone) {
    traffic.layer_matrix_bytes /= DTypeSize(*dtype);
    if (load_options.quantization == WeightQuantization::kInt8) {
      traffic.layer_matrix_bytes += traffic.layer_matrix_bytes / 16;
    }
  }
  traffic.routed_expert_bytes = routed_expert_bytes;
  if (!config.is_moe()) {
    // A dense model streams every linear matrix each step: count what was loaded (codes,
    // scales, zeros), exact for every format, a GGUF file's mixed types included.
    const ModelWeights& w = (*model)->weights();
    const auto held = [](const DeviceMatrix& m) { return uint64_t{m.buffer.bytes()} + m.scales.bytes(); };
    traffic.layer_matrix_bytes = 0;
    for (const LayerWeights& l : w.layers) {
      traffic.layer_matrix_bytes += held(l.qkv) + held(l.o) + held(l.gate_up) + held(l.down);
    }
    traffic.lm_head_bytes = held(w.tied ? w.embed : w.lm_head);
  }
  // The ceiling: the best read seen, before or between the steps.
  const double ceiling = std::max(bw.best_bytes_per_second, *std::max_element(step_bw.begin(), step_bw.end()));
  const double theoretical_s = static_cast<double>(traffic.total()) / ceiling;
  // Paired: each step against the read that followed it, then the median.
  std::vector<double> paired_fractions;
  for (size_t i = 0; i < times.size(); ++i) {
    paired_fractions.push_back(static_cast<double>(traffic.total()) / step_bw[i] / times[i]);
  }
  const double paired_fraction = Median(paired_fractions);
  const double median_s = Median(times);
  const double mean_s = std::accumulate(times.begin(), times.end(), 0.0) / times.size();
  const double min_s = *std::min_element(times.begin(), times.end());
  const double fraction = theoretical_s / median_s;

  std::printf("model %s (%s weights), batch %lld, context %lld, %d threads\n", model_dir.c_str(),
              DTypeName(*dtype), static_cast<long long>(batch), static_cast<long long>(tokens), num_threads);
  std::printf("read bandwidth (ceiling)   %10.2f GB/s\n", ceiling / 1e9);
  std::printf("bytes per decode step      %10.1f MB (weights %.1f of which routed experts %.1f, embedding rows %.3f, "
              "KV read %.1f, KV write %.3f)\n",
              traffic.total() / 1e6, traffic.weight_bytes() / 1e6, traffic.routed_expert_bytes / 1e6,
              traffic.embedding_row_bytes / 1e6, traffic.kv_read_bytes / 1e6, traffic.kv_write_bytes / 1e6);
  std::printf("theoretical step time      %10.2f ms\n", theoretical_s * 1e3);
  std::printf("measured step time         %10.2f ms median, %.2f mean, %.2f min over %zu steps\n",
              median_s * 1e3, mean_s * 1e3, min_s * 1e3, times.size());
  std::printf("achieved bandwidth         %10.2f GB/s\n", traffic.total() / median_s / 1e9);
  std::printf("decode tokens/s            %10.2f (batch x steps/s)\n", batch / median_s);
  std::printf("roofline fraction          %10.1f %% (against the best read)\n", fraction * 100);
  std::printf("paired roofline fraction   %10.1f %% (median of each step against the read after it, %.2f GB/s median)\n",
              paired_fraction * 100, Median(step_bw) / 1e9);

  Json ops = Json::array();
  if (breakdown) {
    const double n = static_cast<double>(breakdown_times.size());
    double op_total = 0;
    std::vector<std::pair<std::string, TimingBackend::OpStats>> rows(backend.ops().begin(), backend.ops().end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    std::printf("\nper-step breakdown over %zu steps (%.2f ms median step with timing):\n", breakdown_times.size(),
                Median(breakdown_times) * 1e3);
    std::printf("  %-28s %8s %10s %8s %12s\n", "op", "calls", "ms", "share", "weight GB/s");
    const double step_ms = std::accumulate(breakdown_times.begin(), breakdown_times.end(), 0.0) / n * 1e3;
    for (const auto& [key, s] : rows) {
      const std::string name = key.rfind("gemm", 0) == 0 ? GemmName(key, config, (*model)->layout()) : key;
      const double ms = s.seconds / n * 1e3;
      op_total += ms;
      const double gbps = s.weight_bytes > 0 ? s.weight_bytes / s.seconds / 1e9 : 0;
      std::printf("  %-28s %8.0f %10.3f %7.1f%% %12s\n", name.c_str(), s.calls / n, ms, 100 * ms / step_ms,
                  gbps > 0 ? absl::StrFormat("%.2f", gbps).c_str() : "-");
      ops.push_back({{"op", name}, {"key", key}, {"calls_per_step", s.calls / n}, {"ms_per_step", ms},
                     {"weight_bytes_per_step", s.weight_bytes / n}, {"weight_gbps", gbps}});
    }
    std::printf("  %-28s %8s %10.3f %7.1f%%   (the rest: collectives, validation, uploads)\n", "sum of ops", "",
                op_total, 100 * op_total / step_ms);
  }

  if (!out.empty()) {
    Json j;
    j["schema"] = "tessera-roofline/v1";
    const BuildInfo build = ProbeBuild();
    j["conditions"] = {{"date", UtcTimestamp()}, {"model", model_dir}, {"dtype", DTypeName(*dtype)},
                         {"quantization", quantization},
                         {"kv_cache_dtype", std::string(KvCacheDTypeName((*model)->kv_cache_dtype()))},
                       {"batch", batch}, {"context_tokens", tokens}, {"threads", num_threads},
                       {"steps", steps}, {"warmup_steps", warmup_steps}, {"backend", "cpu"}, {"tp", 1},
                       {"machine", ToJson(ProbeMachine())},
                       {"build", {{"build_type", build.build_type}, {"version", build.version}}}};
    j["bandwidth"] = {{"buffer_bytes", bw.buffer_bytes}, {"threads", bw.threads},
                      {"repetitions", bw.repetitions}, {"ceiling_bytes_per_second", ceiling},
                      {"best_bytes_per_second", bw.best_bytes_per_second},
                      {"median_bytes_per_second", bw.median_bytes_per_second}};
    j["traffic_bytes"] = {{"layer_matrices", traffic.layer_matrix_bytes}, {"norms", traffic.norm_bytes},
                          {"lm_head", traffic.lm_head_bytes}, {"routed_experts", traffic.routed_expert_bytes}, {"embedding_rows", traffic.embedding_row_bytes},
                          {"kv_read", traffic.kv_read_bytes}, {"kv_write", traffic.kv_write_bytes},
                          {"total", traffic.total()}, {"loaded_weight_bytes", (*model)->weight_bytes()}};
    j["theoretical_step_s"] = theoretical_s;
    j["measured_step_s"] = {{"median", median_s}, {"mean", mean_s}, {"min", min_s}, {"samples", times}};
    j["achieved_bytes_per_second"] = traffic.total() / median_s;
    j["decode_tokens_per_second"] = batch / median_s;
    j["roofline_fraction"] = fraction;
    j["paired_roofline_fraction"] = paired_fraction;
    j["paired_bytes_per_second"] = step_bw;
    j["breakdown"] = ops;
    if (absl::Status s = WriteJsonFile(out, j); !s.ok()) return Fail(std::string(s.message()));
    std::fprintf(stderr, "tessera-roofline: wrote %s\n", out.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) { return tessera::bench::Main(argc, argv); }
