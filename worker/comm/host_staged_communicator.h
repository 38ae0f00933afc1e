#ifndef TESSERA_WORKER_COMM_HOST_STAGED_COMMUNICATOR_H_
#define TESSERA_WORKER_COMM_HOST_STAGED_COMMUNICATOR_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "common/dtype.h"
#include "kernels/backend.h"
#include "worker/communicator.h"

namespace tessera {

// A host-memory communicator (shm, Gloo) for a worker whose buffers live in device memory:
// each collective copies its buffer to host staging through the backend, runs the inner
// collective there and copies the result back. It lets ranks share one GPU, where NCCL
// refuses to form the group (it wants one rank per device).
//
// The copy to the host is ordered after the kernels queued before it (Backend::CopyToHost
// waits for the backend's stream, as the forward pass's reads of the logits rely on), so
// the inner collective sees their outputs; the copy back completes before the call returns,
// so the staging buffer is free for the next collective. Every call therefore waits for
// the device, and none can be recorded into a graph: Capturable() is false.
//
// BF16 and F16 all-reduces are widened to float32 on the host, summed by the inner
// communicator (in rank order with shm) and rounded back once, so every rank gets the same
// bits. A failed copy is recorded by the backend (its ops return void) and fails the step
// when the forward pass checks the backend. Not thread-safe, like the communicators it
// wraps: one thread drives one rank (Abort() may come from another, as for the inner one).
class HostStagedCommunicator final : public Communicator {
 public:
  // `backend` holds the collectives' buffers and must outlive this communicator.
  HostStagedCommunicator(std::unique_ptr<Communicator> inner, kernels::Backend* backend);

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  std::string_view backend_name() const override { return name_; }
  absl::Status AllReduceSum(float* data, size_t count) override;
  absl::Status AllReduceSum(void* data, size_t count, DType dtype) override;
  absl::Status AllGather(const float* send, size_t count, float* recv) override;
  absl::Status Broadcast(void* data, size_t bytes, int root) override;
  absl::Status Barrier() override { return inner_->Barrier(); }
  absl::Status Wait() override { return inner_->Wait(); }
  bool Capturable() const override { return false; }
  bool aborted() const override { return inner_->aborted(); }
  void Abort() override { inner_->Abort(); }

 private:
  // At least `floats` floats of host staging (never null), kept between calls: the
  // activations of every step have the same few sizes.
  float* Staging(size_t floats);

  std::unique_ptr<Communicator> inner_;
  kernels::Backend* backend_;
  const std::string name_;  // "<inner>+host-staged", e.g. for the worker's metrics.
  std::vector<float> staging_;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_COMM_HOST_STAGED_COMMUNICATOR_H_
