#ifndef TESSERA_WORKER_COMM_LOCAL_COMMUNICATOR_H_
#define TESSERA_WORKER_COMM_LOCAL_COMMUNICATOR_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "worker/communicator.h"

namespace tessera {

// Rendezvous state shared by the ranks of an in-process group (one thread per rank).
// Each collective completes when the last rank arrives: that rank computes the result
// for everyone while the others wait, so all-reduce sums in rank order
// (((r0 + r1) + r2) + ...) and every rank gets bit-identical results.
class LocalGroup {
 public:
  static std::shared_ptr<LocalGroup> Create(int world_size, std::chrono::milliseconds timeout);

  int world_size() const { return world_size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }

 private:
  friend class LocalCommunicator;
  enum class Op : uint8_t { kNone, kAllReduceSum, kAllGather, kBroadcast, kBarrier };
  struct Arrival {
    Op op = Op::kNone;
    const void* in = nullptr;
    void* out = nullptr;
    size_t count = 0;  // Floats for reductions and gathers, bytes for broadcast.
    int root = -1;
  };

  LocalGroup(int world_size, std::chrono::milliseconds timeout);
  // Runs one collective for `rank`; blocks until all ranks arrived, the timeout passes
  // or the group aborts.
  absl::Status Run(int rank, const Arrival& arrival);
  // Checks the arrivals agree and produces every rank's output.
  absl::Status CompleteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AbortLocked(absl::Status reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int world_size_;
  const std::chrono::milliseconds timeout_;
  std::atomic<bool> aborted_{false};

  absl::Mutex mu_;
  absl::CondVar cv_;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Arrival> arrivals_ ABSL_GUARDED_BY(mu_);
  std::vector<float> scratch_ ABSL_GUARDED_BY(mu_);
  absl::Status abort_reason_ ABSL_GUARDED_BY(mu_);
};

// One rank of a LocalGroup. Buffers are host memory.
class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank);

  int rank() const override { return rank_; }
  int world_size() const override { return group_->world_size(); }
  std::string_view backend_name() const override { return "local"; }
  using Communicator::AllReduceSum;  // float32 only: the default rejects other dtypes.
  absl::Status AllReduceSum(float* data, size_t count) override;
  absl::Status AllGather(const float* send, size_t count, float* recv) override;
  absl::Status Broadcast(void* data, size_t bytes, int root) override;
  absl::Status Barrier() override;
  bool aborted() const override { return group_->aborted(); }

 private:
  std::shared_ptr<LocalGroup> group_;
  const int rank_;
};

// A fresh group of `world_size` ranks; element r is rank r.
std::vector<std::unique_ptr<LocalCommunicator>> MakeLocalCommunicators(
    int world_size, std::chrono::milliseconds timeout);

}  // namespace tessera

#endif  // TESSERA_WORKER_COMM_LOCAL_COMMUNICATOR_H_
