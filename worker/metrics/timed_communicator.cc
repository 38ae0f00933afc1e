#include "worker/metrics/timed_communicator.h"

#include <chrono>

namespace tessera {

TimedCommunicator::TimedCommunicator(std::unique_ptr<Communicator> inner, WorkerMetrics* metrics)
    : inner_(std::move(inner)), metrics_(metrics) {}

template <typename Fn>
absl::Status TimedCommunicator::Timed(const char* op, uint64_t bytes, Fn&& fn) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = fn();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  seconds_.fetch_add(seconds);
  if (metrics_ != nullptr && s.ok()) metrics_->Collective(op, seconds, bytes);
  return s;
}

absl::Status TimedCommunicator::AllReduceSum(float* data, size_t count) {
  return Timed("all_reduce", count * sizeof(float), [&] { return inner_->AllReduceSum(data, count); });
}

absl::Status TimedCommunicator::AllReduceSum(void* data, size_t count, DType dtype) {
  return Timed("all_reduce", count * DTypeSize(dtype),
               [&] { return inner_->AllReduceSum(data, count, dtype); });
}

absl::Status TimedCommunicator::AllGather(const float* send, size_t count, float* recv) {
  return Timed("all_gather", count * sizeof(float), [&] { return inner_->AllGather(send, count, recv); });
}

absl::Status TimedCommunicator::Broadcast(void* data, size_t bytes, int root) {
  return Timed("broadcast", bytes, [&] { return inner_->Broadcast(data, bytes, root); });
}

absl::Status TimedCommunicator::Barrier() {
  return Timed("barrier", 0, [&] { return inner_->Barrier(); });
}

double TimedCommunicator::TakeCollectiveSeconds() { return seconds_.exchange(0); }

}  // namespace tessera
