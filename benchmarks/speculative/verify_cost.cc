// tessera-verify-cost: what scoring speculative tokens costs. Speculation pays when a
// forward pass over 1 + k tokens of one sequence (with logits for each) costs little more
// than decoding 1, which is the case where decode is bound by reading the weights. This
// times that step for 1 + k = 1..N tokens on one sequence with a given context, the sizes
// interleaved round by round so machine noise falls on all of them alike, and reports each
// one's median against the 1-token step: the break-even tokens per step of speculation.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "benchmarks/roofline/timing_backend.h"
#include "benchmarks/serving/machine_info.h"
#include "common/flag_set.h"
#include "common/progress_line.h"
#include "common/quantization.h"
#include "kernels/backend.h"
#include "nlohmann/json.hpp"
#include "worker/communicator.h"
#include "worker/llama_model.h"

namespace tessera {
namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "tessera-verify-cost: %s\n", message.c_str());
  return 1;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// One sequence whose cache holds `context` tokens after the step, the last `n` of them
// computed now, each with its logits (the verification of n - 1 proposals).
StepBatch VerifyStep(int n, int context, int block_size) {
  StepBatch b;
  const int blocks = (context + block_size - 1) / block_size;
  b.max_blocks_per_seq = blocks;
  std::vector<int32_t> tokens(context), table(blocks);
  for (int i = 0; i < context; ++i) tokens[i] = 3 + i % 500;
  for (int j = 0; j < blocks; ++j) table[j] = 1 + j;
  b.AddSequence(tokens, table, context - n, context, block_size, false);
  for (int r = 0; r < n; ++r) b.logits_rows.push_back(r);
  return b;
}

int Main(int argc, char** argv) {
  std::string model_dir, out, quantization = "none";
  int64_t context = 256, max_tokens = 9, rounds = 12, threads = 0;
  FlagSet flags("tessera-verify-cost",
                "Times one sequence's forward pass over 1..--max-tokens new tokens with logits for each\n"
                "(speculative verification), interleaved, and prints each size's cost against decoding one.");
  flags.String("model", &model_dir, "Model folder (Hugging Face Llama).");
  flags.Int("context", &context, "KV context of the sequence after the step.");
  flags.Int("max-tokens", &max_tokens, "Largest step: 1 + proposals.");
  flags.Int("rounds", &rounds, "Measured rounds (each times every size once).");
  flags.Int("threads", &threads, "CPU threads (0: every usable core).");
  flags.String("quantization", &quantization, "Weights quantized at load time: none, int8 or fp8.");
  flags.String("out", &out, "Write the JSON result here.");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) return Fail(std::string(s.message()));
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (model_dir.empty()) return Fail("--model is required");
  if (max_tokens < 1 || context < max_tokens || rounds < 1) {
    return Fail("need 1 <= --max-tokens <= --context and --rounds >= 1");
  }
  ModelLoadOptions options;
  if (auto q = ParseWeightQuantization(quantization); q.ok()) {
    options.quantization = *q;
  } else {
    return Fail(std::string(q.status().message()));
  }
  const int num_threads = threads > 0 ? static_cast<int>(threads) : bench::ProbeMachine().usable_cores;
  std::unique_ptr<kernels::Backend> cpu = kernels::MakeCpuBackend(num_threads);
  bench::TimingBackend timing(cpu.get());
  kernels::Backend* backend = &timing;
  SingleRankCommunicator comm;
  ProgressLine progress("loading " + model_dir);
  auto model = LlamaModel::Load(model_dir, backend, &comm, [&](int done, int total, uint64_t bytes) {
    progress.Update(done, total, absl::StrFormat("(%.1f MB)", bytes / 1e6));
  }, options);
  if (!model.ok()) return Fail(std::string(model.status().message()));
  const int block_size = 16;
  auto cache = (*model)->CreateKvCache(static_cast<int>((context + block_size - 1) / block_size) + 1, block_size);
  if (!cache.ok()) return Fail(std::string(cache.status().message()));
  std::vector<StepBatch> steps;
  for (int n = 1; n <= max_tokens; ++n) steps.push_back(VerifyStep(n, static_cast<int>(context), block_size));
  // The context's KV, once (its values do not matter for timing, only that it is there).
  std::vector<float> logits;
  if (absl::Status s = (*model)->Forward(VerifyStep(static_cast<int>(context), static_cast<int>(context), block_size),
                                         cache->get(), &logits);
      !s.ok()) {
    return Fail(std::string(s.message()));
  }
  std::vector<std::vector<double>> times(steps.size());
  for (int64_t round = -2; round < rounds; ++round) {  // Two warm-up rounds.
    std::fprintf(stderr, "\rtessera-verify-cost: round %lld of %lld", static_cast<long long>(round + 3),
                 static_cast<long long>(rounds + 2));
    for (size_t i = 0; i < steps.size(); ++i) {
      const auto start = std::chrono::steady_clock::now();
      if (absl::Status s = (*model)->Forward(steps[i], cache->get(), &logits); !s.ok()) {
        return Fail(std::string(s.message()));
      }
      if (round >= 0) {
        times[i].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
    }
  }
  std::fprintf(stderr, "\n");
  // Where the time goes, per op, for each size once more.
  std::vector<std::map<std::string, bench::TimingBackend::OpStats>> breakdown;
  for (size_t i = 0; i < steps.size(); ++i) {
    timing.Reset();
    timing.set_enabled(true);
    if (absl::Status s = (*model)->Forward(steps[i], cache->get(), &logits); !s.ok()) {
      return Fail(std::string(s.message()));
    }
    timing.set_enabled(false);
    breakdown.push_back(timing.ops());
  }
  std::printf("op ms by step size:\n%-32s", "op");
  for (size_t i = 0; i < steps.size(); ++i) std::printf(" %7zu", i + 1);
  std::printf("\n");
  for (const auto& [op, unused] : breakdown.back()) {
    std::printf("%-32s", op.c_str());
    for (const auto& b : breakdown) {
      auto it = b.find(op);
      std::printf(" %7.2f", it == b.end() ? 0.0 : it->second.seconds * 1e3);
    }
    std::printf("\n");
  }
  const double one = Median(times[0]);
  nlohmann::json rows = nlohmann::json::array();
  std::printf("tokens  step ms  x decode  break-even tokens/step\n");
  for (size_t i = 0; i < steps.size(); ++i) {
    const double m = Median(times[i]);
    std::printf("%6zu  %7.2f  %8.2f  %8.2f\n", i + 1, m * 1e3, m / one, m / one);
    rows.push_back({{"tokens", i + 1}, {"median_step_s", m}, {"relative_to_decode", m / one},
                    {"samples", times[i]}});
  }
  if (!out.empty()) {
    const bench::BuildInfo build = bench::ProbeBuild();
    nlohmann::json j;
    j["schema"] = "tessera-verify-cost/v1";
    j["conditions"] = {{"date", bench::UtcTimestamp()}, {"model", model_dir}, {"quantization", quantization},
                       {"context_tokens", context}, {"rounds", rounds}, {"threads", num_threads},
                       {"backend", "cpu"}, {"machine", bench::ToJson(bench::ProbeMachine())},
                       {"build", {{"build_type", build.build_type}, {"version", build.version}}}};
    j["steps"] = rows;
    std::ofstream(out) << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) { return tessera::Main(argc, argv); }
