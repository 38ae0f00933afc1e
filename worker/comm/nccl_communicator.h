#ifndef TESSERA_WORKER_COMM_NCCL_COMMUNICATOR_H_
#define TESSERA_WORKER_COMM_NCCL_COMMUNICATOR_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/communicator.h"

// Compiled only in CUDA builds with NCCL (TESSERA_HAVE_NCCL); the header itself needs no
// CUDA or NCCL headers so callers can include it unconditionally behind that macro.
namespace tessera {

// A fresh ncclUniqueId as its 128 raw bytes; rank 0 creates it and the coordinator relays
// it to the other ranks.
absl::StatusOr<std::string> GenerateNcclUniqueId();

struct NcclCommunicatorOptions {
  std::string unique_id;  // 128 bytes from GenerateNcclUniqueId().
  int rank = 0;
  int world_size = 1;
  int device = 0;                            // CUDA device ordinal of this rank.
  void* stream = nullptr;                    // The worker's cudaStream_t; nullptr = legacy default.
  std::chrono::milliseconds timeout{30000};  // Bounds init and each collective.
  // AllReduceSum and AllGather return once queued on `stream`, after the kernels that
  // produce their input, so the host goes on queueing the next layer; Wait() bounds them.
  // Only for a caller that reads results through the same stream (the worker's backend).
  bool queue_without_waiting = false;
};

// NCCL in non-blocking mode: every call enqueues on the worker's stream and then polls
// cudaStreamQuery / ncclCommGetAsyncError until it finishes, fails, or the timeout passes;
// the last two call ncclCommAbort, so a dead peer never hangs the process. With
// queue_without_waiting the all-reduces and all-gathers only enqueue, and Wait() does the
// polling once for all of them (the forward pass calls it before reading on the host);
// a peer that dies meanwhile is still caught there, or by Abort() from the coordinator. Buffers are
// device memory. NCCL picks its own reduction order (rings/trees), so results are
// identical on every rank but not a rank-order sum.
class NcclCommunicator final : public Communicator {
 public:
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      const NcclCommunicatorOptions& options);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string_view backend_name() const override { return "nccl"; }
  absl::Status AllReduceSum(float* data, size_t count) override;
  absl::Status AllReduceSum(void* data, size_t count, DType dtype) override;
  absl::Status AllGather(const float* send, size_t count, float* recv) override;
  absl::Status Broadcast(void* data, size_t bytes, int root) override;
  absl::Status Barrier() override;
  absl::Status Wait() override;
  bool Capturable() const override { return queue_only_; }
  bool aborted() const override { return aborted_.load(std::memory_order_acquire); }

 private:
  struct Impl;
  NcclCommunicator(std::unique_ptr<Impl> impl, int rank, int world_size,
                   std::chrono::milliseconds timeout);
  // Enqueues with `enqueue` (returns an ncclResult_t) and, with `wait`, waits for it.
  template <typename Fn>
  absl::Status Run(const char* op, size_t bytes, Fn&& enqueue, bool wait);
  // Records the completion event on the stream (never while it captures), then waits.
  absl::Status RecordAndWait(const char* op, size_t bytes);
  // Polls the completion event until done, failed, or the timeout (then aborts).
  absl::Status WaitForEvent(const char* op, size_t bytes);
  absl::Status AbortedError(const char* op) const;
  absl::Status Fail(const char* op, absl::StatusCode code, absl::string_view why);

  std::unique_ptr<Impl> impl_;
  const int rank_;
  const int world_size_;
  const std::chrono::milliseconds timeout_;
  std::atomic<bool> aborted_{false};
  std::string abort_reason_;
  bool queue_only_ = false;
  const char* pending_op_ = nullptr;  // The last collective queued without waiting.
  size_t pending_bytes_ = 0;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_COMM_NCCL_COMMUNICATOR_H_
