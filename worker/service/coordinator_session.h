#ifndef TESSERA_WORKER_SERVICE_COORDINATOR_SESSION_H_
#define TESSERA_WORKER_SERVICE_COORDINATOR_SESSION_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "grpcpp/security/credentials.h"
#include "tessera/v1/worker.grpc.pb.h"
#include "worker/service/worker_service.h"

namespace tessera {

struct CoordinatorSessionOptions {
  std::string coordinator;                // host:port of the coordinator's cluster port.
  v1::RegisterWorkerRequest registration;  // Address, hints, device.
  std::string join_secret;                 // Sent with every call; empty: none.
  // Of the channel to the coordinator (mutual TLS); null: plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string server_name;  // The name the coordinator's certificate must carry; empty: its host.
  std::chrono::milliseconds max_backoff{2000};
};

// A worker's membership: registers with the coordinator (retrying with backoff while it
// is away), then heartbeats. When the coordinator forgets the worker (it restarted, or
// the worker's group lost a peer) or stays unreachable for its session timeout, the
// worker leaves its group (WorkerServiceImpl::Leave) and registers again, so a restarted
// coordinator or a re-forming replica gets it back without anyone touching it.
class CoordinatorSession {
 public:
  CoordinatorSession(CoordinatorSessionOptions options, WorkerServiceImpl* service);

  // Runs until `stop`; `tick` is called at least every 100 ms (the liveness signal).
  // Returns an error only when the coordinator refuses the registration as invalid
  // (a hint out of range): retrying cannot help.
  absl::Status Run(const std::atomic<bool>& stop, const std::function<void()>& tick);

  // Registered and heard from the coordinator within its session timeout.
  bool connected() const { return connected_.load(); }

 private:
  // Registers, retrying with backoff; false when stopped first.
  absl::StatusOr<bool> Register(const std::atomic<bool>& stop, const std::function<void()>& tick);
  // Heartbeats until the session is lost (returns why) or `stop`.
  std::string Heartbeat(const std::atomic<bool>& stop, const std::function<void()>& tick);
  void SleepFor(std::chrono::milliseconds d, const std::atomic<bool>& stop, const std::function<void()>& tick);

  const CoordinatorSessionOptions options_;
  WorkerServiceImpl* const service_;
  std::unique_ptr<v1::Cluster::Stub> stub_;
  std::atomic<bool> connected_{false};
  std::string worker_id_;
  std::chrono::milliseconds interval_{500};
  std::chrono::milliseconds session_timeout_{5000};
};

}  // namespace tessera

#endif  // TESSERA_WORKER_SERVICE_COORDINATOR_SESSION_H_
