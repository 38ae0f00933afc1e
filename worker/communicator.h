#ifndef TESSERA_WORKER_COMMUNICATOR_H_
#define TESSERA_WORKER_COMMUNICATOR_H_

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/dtype.h"

namespace tessera {

// Collectives between the ranks of one tensor-parallel group. Implementations: an
// in-process one (threads of one process, for tests and single-host runs), Gloo (CPU
// builds, TCP) and NCCL (CUDA builds). Every call has a timeout; a call that times out or
// fails aborts the communicator: it returns an error now and on every later call, and
// never hangs. Buffers live in the memory of the rank's backend.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string_view backend_name() const = 0;

  // data[i] = sum over ranks of data[i], identical on every rank (summed in rank order
  // where the backend allows, so results are reproducible).
  virtual absl::Status AllReduceSum(float* data, size_t count) = 0;
  // The same over `count` elements of `dtype`, summed in float32 where the backend allows
  // (the forward pass reduces activations in the backend's activation dtype, BF16 on CUDA).
  // The default forwards kF32 and rejects the rest; NCCL implements kBF16.
  virtual absl::Status AllReduceSum(void* data, size_t count, DType dtype) {
    if (dtype == DType::kF32) return AllReduceSum(static_cast<float*>(data), count);
    return absl::UnimplementedError(absl::StrCat(std::string(backend_name()),
                                                 " communicator: all-reduce of ",
                                                 DTypeName(dtype), " is not supported"));
  }

  // recv[r * count + i] = send_of_rank_r[i] on every rank.
  virtual absl::Status AllGather(const float* send, size_t count, float* recv) = 0;

  // Copies `bytes` from `root`'s buffer into every other rank's.
  virtual absl::Status Broadcast(void* data, size_t bytes, int root) = 0;

  virtual absl::Status Barrier() = 0;

  // Collectives may return once queued behind the backend's pending work, before they
  // complete (NCCL on the compute stream); Wait() returns when all of them have, or fails
  // at the timeout like a collective. Call it before reading their results on the host.
  // Implementations that complete each call return at once.
  virtual absl::Status Wait() { return absl::OkStatus(); }

  // Whether the collectives may be recorded into a backend graph (Backend::BeginCapture):
  // they must only enqueue on the backend's stream, never wait on the host.
  virtual bool Capturable() const { return world_size() == 1; }

  // True once a collective failed or timed out; the group must be re-formed.
  virtual bool aborted() const = 0;

  // Called from another thread when the group is known dead (the coordinator dissolved
  // it): a collective blocked waiting for a dead peer fails now instead of at its
  // timeout, and every later one fails. Where a backend cannot interrupt a collective,
  // its timeout still bounds it.
  virtual void Abort() {}
};

// A world of one: every collective is a no-op.
class SingleRankCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string_view backend_name() const override { return "single"; }
  absl::Status AllReduceSum(float*, size_t) override { return absl::OkStatus(); }
  absl::Status AllReduceSum(void*, size_t, DType) override { return absl::OkStatus(); }
  absl::Status AllGather(const float* send, size_t count, float* recv) override;
  absl::Status Broadcast(void*, size_t, int) override { return absl::OkStatus(); }
  absl::Status Barrier() override { return absl::OkStatus(); }
  bool aborted() const override { return false; }
};

}  // namespace tessera

#endif  // TESSERA_WORKER_COMMUNICATOR_H_
