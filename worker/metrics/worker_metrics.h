#ifndef TESSERA_WORKER_METRICS_WORKER_METRICS_H_
#define TESSERA_WORKER_METRICS_WORKER_METRICS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "tessera/v1/worker.pb.h"

namespace tessera {

// "prefill" (every scheduled sequence computes prompt tokens), "decode" (every one
// computes the token sampled last step), "mixed", or "" for a step that runs nothing.
absl::string_view ClassifyStep(const v1::StepRequest& request);

// One worker's Prometheus metrics (names in README.md, "Metrics"). The instance label
// Prometheus adds tells workers apart; tessera_worker_info carries replica and rank.
// Thread-safe (prometheus-cpp metrics are atomic; the info gauge takes a lock).
class WorkerMetrics {
 public:
  WorkerMetrics();

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  void GroupJoined(int replica, int rank, int world_size, absl::string_view communicator);
  void ShardLoaded(absl::string_view model, uint64_t weight_bytes);
  void CacheAllocated(uint64_t kv_cache_bytes);
  // `phase` from ClassifyStep; `ok` false for a step that returned an error.
  void StepFinished(absl::string_view phase, double step_seconds, double forward_seconds, bool ok);
  // One collective: op is "all_reduce", "all_gather", "broadcast" or "barrier".
  void Collective(absl::string_view op, double seconds, uint64_t bytes);
  // Rank 0's structured-output work in one step: grammar states, masks (trie walks on a
  // cache miss) and masking `rows` logits rows.
  void GrammarWork(double seconds, int rows);
  // `n` forward passes of a step kind ("decode", "mixed", "prefill") that ran a certain way:
  // "replayed" a captured graph, "captured" one (running eagerly), or "eager".
  void ForwardPasses(absl::string_view step, absl::string_view graph, int64_t n);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Histogram>* step_seconds_;
  prometheus::Family<prometheus::Counter>* steps_;
  prometheus::Histogram* forward_seconds_;
  prometheus::Family<prometheus::Histogram>* collective_seconds_;
  prometheus::Family<prometheus::Counter>* collective_bytes_;
  prometheus::Counter* grammar_seconds_;
  prometheus::Counter* grammar_rows_;
  prometheus::Family<prometheus::Counter>* forward_passes_;
  prometheus::Gauge* weight_bytes_;
  prometheus::Gauge* kv_cache_bytes_;
  prometheus::Family<prometheus::Gauge>* info_;
  prometheus::Gauge* info_metric_ = nullptr;
  std::string model_;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_METRICS_WORKER_METRICS_H_
