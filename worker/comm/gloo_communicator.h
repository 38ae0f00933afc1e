#ifndef TESSERA_WORKER_COMM_GLOO_COMMUNICATOR_H_
#define TESSERA_WORKER_COMM_GLOO_COMMUNICATOR_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/rendezvous/kv_store_security.h"
#include "worker/communicator.h"

namespace gloo {
class Context;
}  // namespace gloo

namespace tessera {

struct GlooCommunicatorOptions {
  // The KvStoreServer the coordinator hosts for rendezvous.
  std::string store_host = "127.0.0.1";
  int store_port = 0;
  // How to authenticate to the store (mutual TLS, join secret); must match the store's.
  KvStoreSecurity store_security;
  // Namespace of this group's keys in the store. Must be unique per group formation
  // (e.g. "replica3/gen7"): keys from an earlier formation would point at dead sockets.
  std::string prefix;
  int rank = 0;
  int world_size = 1;
  // Address of this rank's Gloo TCP endpoint: a host name or IP the peers can reach.
  std::string bind_host = "127.0.0.1";
  // Bounds rendezvous, connecting and each collective.
  std::chrono::milliseconds timeout{30000};
  // An all-reduce of at most this many bytes per rank is an all-gather and a sum in rank
  // order; a larger one is Gloo's ring (0: always the ring).
  size_t gather_allreduce_max_bytes = 32 << 10;
};

// Collectives over Gloo's TCP transport (CPU builds). A small all-reduce is an all-gather
// and a sum in rank order; a large one is Gloo's ring, whose results are identical on
// every rank but may differ from a rank-order sum in the last bits. Why the all-gather:
// each step of Gloo's ring waits for the peer to post its receive, so a two-rank ring
// all-reduce pays the link's latency about five times, the all-gather about three times
// (tests/netfault measures both); it sends (ranks - 1) times the ring's bytes, which only
// small messages can afford. Gloo exceptions become
// absl errors naming the op; after any failure the communicator closes its connections
// (so peers blocked on it fail promptly instead of waiting out their timeout) and every
// later call fails fast. Not thread-safe: one thread drives one rank.
class GlooCommunicator final : public Communicator {
 public:
  // Rendezvous through the store and connect a full mesh to the other ranks.
  static absl::StatusOr<std::unique_ptr<GlooCommunicator>> Create(
      const GlooCommunicatorOptions& options);
  ~GlooCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string_view backend_name() const override { return "gloo"; }
  using Communicator::AllReduceSum;  // float32 only: the default rejects other dtypes.
  absl::Status AllReduceSum(float* data, size_t count) override;
  absl::Status AllGather(const float* send, size_t count, float* recv) override;
  absl::Status Broadcast(void* data, size_t bytes, int root) override;
  absl::Status Barrier() override;
  bool aborted() const override { return aborted_.load(std::memory_order_acquire); }

 private:
  GlooCommunicator(std::shared_ptr<gloo::Context> context, const GlooCommunicatorOptions& options);
  // Runs `body`, mapping a gloo exception (or an earlier abort) to an error for `op`.
  template <typename Fn>
  absl::Status Guarded(const char* op, size_t bytes, Fn&& body);

  std::shared_ptr<gloo::Context> context_;
  const int rank_;
  const int world_size_;
  const std::chrono::milliseconds timeout_;
  const size_t gather_allreduce_max_bytes_;
  std::atomic<bool> aborted_{false};
  std::string abort_reason_;
  std::vector<float> gathered_;  // The all-gather all-reduce's buffer, kept between calls.
};

}  // namespace tessera

#endif  // TESSERA_WORKER_COMM_GLOO_COMMUNICATOR_H_
