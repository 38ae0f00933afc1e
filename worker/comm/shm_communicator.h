#ifndef TESSERA_WORKER_COMM_SHM_COMMUNICATOR_H_
#define TESSERA_WORKER_COMM_SHM_COMMUNICATOR_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/rendezvous/kv_store_security.h"
#include "worker/communicator.h"

namespace tessera {

struct ShmCommunicatorOptions {
  // The KvStoreServer used to agree on the segment name (as for GlooCommunicator).
  std::string store_host = "127.0.0.1";
  int store_port = 0;
  // How to authenticate to the store (mutual TLS, join secret); must match the store's.
  KvStoreSecurity store_security;
  std::string prefix;  // Unique per group formation.
  int rank = 0;
  int world_size = 1;
  std::chrono::milliseconds timeout{30000};
  // Per-rank staging area; larger collectives run in chunks of this size.
  size_t slot_bytes = size_t{1} << 20;
};

// Collectives between processes (or threads) on one host through a POSIX shared-memory
// segment: each rank stages its chunk in its own slot, a futex barrier, then every rank
// reads all slots. Small all-reduces cost two barriers and a few memcpys instead of TCP
// round trips. All-reduce sums in rank order, so results match LocalCommunicator
// bit for bit. A rank that does not arrive within the timeout aborts the whole group
// (a flag in the segment), so every rank then fails fast. Buffers are host memory.
class ShmCommunicator final : public Communicator {
 public:
  static absl::StatusOr<std::unique_ptr<ShmCommunicator>> Create(
      const ShmCommunicatorOptions& options);
  ~ShmCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string_view backend_name() const override { return "shm"; }
  using Communicator::AllReduceSum;  // float32 only: the default rejects other dtypes.
  absl::Status AllReduceSum(float* data, size_t count) override;
  absl::Status AllGather(const float* send, size_t count, float* recv) override;
  absl::Status Broadcast(void* data, size_t bytes, int root) override;
  absl::Status Barrier() override;
  bool aborted() const override;
  void Abort() override;

  struct Header;  // Layout of the segment's first page (defined in the .cc).

 private:
  ShmCommunicator(void* base, size_t mapped_bytes, int rank, int world_size, size_t slot_bytes,
                  std::chrono::milliseconds timeout);
  // Announces this rank's collective and checks, after a barrier, that every rank
  // called the same one with the same size.
  absl::Status Begin(const char* op, uint32_t op_code, uint64_t count, int32_t root);
  absl::Status CheckCells(const char* op);
  absl::Status Wait(const char* op, absl::Time deadline);
  absl::Status Fail(const char* op, absl::StatusCode code, std::string why);
  char* slot(int r) const;

  void* base_;
  const size_t mapped_bytes_;
  const int rank_;
  const int world_size_;
  const size_t slot_bytes_;
  const std::chrono::milliseconds timeout_;
  std::atomic<bool> aborted_{false};
  std::string abort_reason_;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_COMM_SHM_COMMUNICATOR_H_
