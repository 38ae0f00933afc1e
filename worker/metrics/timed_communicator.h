#ifndef TESSERA_WORKER_METRICS_TIMED_COMMUNICATOR_H_
#define TESSERA_WORKER_METRICS_TIMED_COMMUNICATOR_H_

#include <atomic>
#include <memory>

#include "worker/communicator.h"
#include "worker/metrics/worker_metrics.h"

namespace tessera {

// A Communicator decorator that times every collective and counts its bytes into
// WorkerMetrics, and sums the seconds so a step can report its collective time.
class TimedCommunicator final : public Communicator {
 public:
  TimedCommunicator(std::unique_ptr<Communicator> inner, WorkerMetrics* metrics);

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  std::string_view backend_name() const override { return inner_->backend_name(); }
  absl::Status AllReduceSum(float* data, size_t count) override;
  absl::Status AllReduceSum(void* data, size_t count, DType dtype) override;
  absl::Status AllGather(const float* send, size_t count, float* recv) override;
  absl::Status Broadcast(void* data, size_t bytes, int root) override;
  absl::Status Barrier() override;
  // Timing wraps the host call only, so a queued collective waits and may be recorded into
  // a graph exactly as the inner one would (a replayed graph's collectives are not timed).
  absl::Status Wait() override { return inner_->Wait(); }
  bool Capturable() const override { return inner_->Capturable(); }
  bool aborted() const override { return inner_->aborted(); }
  void Abort() override { inner_->Abort(); }

  // Seconds spent in collectives since the last call (the step in between).
  double TakeCollectiveSeconds();

 private:
  template <typename Fn>
  absl::Status Timed(const char* op, uint64_t bytes, Fn&& fn);

  std::unique_ptr<Communicator> inner_;
  WorkerMetrics* metrics_;
  std::atomic<double> seconds_{0};
};

}  // namespace tessera

#endif  // TESSERA_WORKER_METRICS_TIMED_COMMUNICATOR_H_
