#include "worker/metrics/worker_metrics.h"

#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

const prometheus::Histogram::BucketBoundaries& StepBuckets() {
  static const prometheus::Histogram::BucketBoundaries b = {
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0};
  return b;
}
const prometheus::Histogram::BucketBoundaries& CollectiveBuckets() {
  static const prometheus::Histogram::BucketBoundaries b = {
      0.00001, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0};
  return b;
}

}  // namespace

absl::string_view ClassifyStep(const v1::StepRequest& request) {
  int prefill = request.new_sequences_size(), decode = 0;
  for (const v1::CachedSequence& c : request.cached_sequences()) {
    // A sequence that sampled last step carries that token; a chunked prefill does not.
    if (c.new_token_ids_size() > 0) {
      ++decode;
    } else {
      ++prefill;
    }
  }
  if (request.scheduled_seq_ids_size() == 0 || prefill + decode == 0) return "";
  if (decode == 0) return "prefill";
  if (prefill == 0) return "decode";
  return "mixed";
}

WorkerMetrics::WorkerMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  auto& r = *registry_;
  step_seconds_ = &prometheus::BuildHistogram()
                       .Name("tessera_worker_step_duration_seconds")
                       .Help("Wall time of ExecuteStep on this rank, by phase.")
                       .Register(r);
  steps_ = &prometheus::BuildCounter()
                .Name("tessera_worker_steps_total")
                .Help("Steps executed on this rank, by phase and result (ok|error).")
                .Register(r);
  forward_seconds_ = &prometheus::BuildHistogram()
                          .Name("tessera_worker_forward_seconds")
                          .Help("Forward pass time of one step on this rank (collectives included).")
                          .Register(r)
                          .Add({}, StepBuckets());
  collective_seconds_ = &prometheus::BuildHistogram()
                             .Name("tessera_worker_collective_seconds")
                             .Help("Time of one collective call, by op.")
                             .Register(r);
  collective_bytes_ = &prometheus::BuildCounter()
                           .Name("tessera_worker_collective_bytes_total")
                           .Help("Bytes this rank contributed to collectives, by op.")
                           .Register(r);
  weight_bytes_ = &prometheus::BuildGauge()
                       .Name("tessera_worker_weight_bytes")
                       .Help("Bytes of this rank's weight shard.")
                       .Register(r)
                       .Add({});
  kv_cache_bytes_ = &prometheus::BuildGauge()
                         .Name("tessera_worker_kv_cache_bytes")
                         .Help("Bytes of this rank's KV-cache allocation.")
                         .Register(r)
                         .Add({});
  grammar_seconds_ = &prometheus::BuildCounter()
                         .Name("tessera_worker_grammar_seconds_total")
                         .Help("Time rank 0 spent holding constrained sequences to their grammars "
                               "(states, token masks, masking the logits).")
                         .Register(r)
                         .Add({});
  grammar_rows_ = &prometheus::BuildCounter()
                      .Name("tessera_worker_grammar_rows_total")
                      .Help("Logits rows rank 0 masked with a grammar.")
                      .Register(r)
                      .Add({});
  forward_passes_ = &prometheus::BuildCounter()
                        .Name("tessera_worker_forward_passes_total")
                        .Help("Forward passes of the served model by step kind (decode|mixed|"
                              "prefill) and graph use (replayed: a captured graph; captured: "
                              "ran eagerly and recorded one; eager: no graph).")
                        .Register(r);
  info_ = &prometheus::BuildGauge()
               .Name("tessera_worker_info")
               .Help("This rank's place in the cluster (value 1).")
               .Register(r);
}

void WorkerMetrics::GroupJoined(int replica, int rank, int world_size, absl::string_view communicator) {
  if (info_metric_ != nullptr) info_->Remove(info_metric_);
  info_metric_ = &info_->Add({{"replica", absl::StrCat(replica)},
                              {"rank", absl::StrCat(rank)},
                              {"world_size", absl::StrCat(world_size)},
                              {"communicator", std::string(communicator)}});
  info_metric_->Set(1);
  weight_bytes_->Set(0);
  kv_cache_bytes_->Set(0);
}

void WorkerMetrics::ShardLoaded(absl::string_view model, uint64_t weight_bytes) {
  model_ = std::string(model);
  weight_bytes_->Set(static_cast<double>(weight_bytes));
}

void WorkerMetrics::CacheAllocated(uint64_t kv_cache_bytes) {
  kv_cache_bytes_->Set(static_cast<double>(kv_cache_bytes));
}

void WorkerMetrics::StepFinished(absl::string_view phase, double step_seconds, double forward_seconds, bool ok) {
  if (phase.empty()) return;
  const std::string p(phase);
  steps_->Add({{"phase", p}, {"result", ok ? "ok" : "error"}}).Increment();
  if (!ok) return;
  step_seconds_->Add({{"phase", p}}, StepBuckets()).Observe(step_seconds);
  forward_seconds_->Observe(forward_seconds);
}

void WorkerMetrics::Collective(absl::string_view op, double seconds, uint64_t bytes) {
  const prometheus::Labels l = {{"op", std::string(op)}};
  collective_seconds_->Add(l, CollectiveBuckets()).Observe(seconds);
  collective_bytes_->Add(l).Increment(static_cast<double>(bytes));
}

void WorkerMetrics::GrammarWork(double seconds, int rows) {
  grammar_seconds_->Increment(seconds);
  grammar_rows_->Increment(rows);
}

void WorkerMetrics::ForwardPasses(absl::string_view step, absl::string_view graph, int64_t n) {
  if (n <= 0) return;
  forward_passes_->Add({{"step", std::string(step)}, {"graph", std::string(graph)}})
      .Increment(static_cast<double>(n));
}

}  // namespace tessera
