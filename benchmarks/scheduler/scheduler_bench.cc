// One scheduling step (Schedule + Update) of a replica whose running queue is all decodes.
// Target: under 200 us with 1,024 sequences, so the coordinator never waits on itself.
#include <cstdio>
#include <memory>
#include <vector>

#include "benchmark/benchmark.h"
#include "coordinator/scheduler/scheduler.h"

namespace tessera::sched {
namespace {

constexpr int kPromptTokens = 32;
constexpr int kMaxNewTokens = 4096;
constexpr int kBlockSize = 16;
constexpr int kSteps = 2000;  // Timed steps; fewer than kMaxNewTokens so nothing finishes.

StepResult AnswerAll(const StepPlan& plan) {
  StepResult result;
  result.step_id = plan.step_id;
  result.sampled.reserve(plan.num_scheduled_seqs());
  for (const auto& d : plan.new_seqs) if (d.samples_token) result.sampled.push_back({d.seq_id, 7});
  for (const auto& d : plan.cached_seqs) if (d.samples_token) result.sampled.push_back({d.seq_id, 7});
  return result;
}

void BM_DecodeStep(benchmark::State& state) {
  const int num_seqs = static_cast<int>(state.range(0));
  SchedulerConfig c;
  c.block_size = kBlockSize;
  c.num_blocks = 1 + num_seqs * ((kPromptTokens + kMaxNewTokens) / kBlockSize + 1);
  c.max_num_seqs = num_seqs;
  c.max_num_batched_tokens = 8192;
  c.enable_prefix_caching = state.range(1) != 0;
  auto scheduler = Scheduler::Create(c);
  if (!scheduler.ok()) {
    state.SkipWithError(std::string(scheduler.status().message()).c_str());
    return;
  }
  Scheduler& s = **scheduler;
  for (int i = 0; i < num_seqs; ++i) {
    Request r;
    r.seq_id = i;
    for (int t = 0; t < kPromptTokens; ++t) r.prompt_token_ids.push_back(i * kPromptTokens + t);
    r.options.max_new_tokens = kMaxNewTokens;
    r.options.ignore_eos = true;
    if (!s.AddRequest(std::move(r)).ok()) {
      state.SkipWithError("AddRequest failed");
      return;
    }
  }
  // Prefill everything outside the timed region.
  while (s.stats().num_waiting > 0 || s.kv_cache_manager().num_sequences() < num_seqs) {
    StepPlan plan = s.Schedule();
    if (!s.Update(AnswerAll(plan)).ok()) {
      state.SkipWithError("Update failed during prefill");
      return;
    }
  }
  for (auto _ : state) {
    StepPlan plan = s.Schedule();
    auto events = s.Update(AnswerAll(plan));
    benchmark::DoNotOptimize(events);
    if (plan.total_num_scheduled_tokens != num_seqs) {
      state.SkipWithError("not every sequence decoded in the step");
      return;
    }
  }
  state.counters["seqs"] = num_seqs;
  state.counters["time_per_seq"] = benchmark::Counter(
      static_cast<double>(num_seqs), benchmark::Counter::kIsIterationInvariantRate |
                                         benchmark::Counter::kInvert);
}

BENCHMARK(BM_DecodeStep)
    ->ArgNames({"seqs", "prefix_cache"})
    ->Args({1024, 1})
    ->Args({1024, 0})
    ->Args({256, 1})
    ->Iterations(kSteps)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace tessera::sched

BENCHMARK_MAIN();
