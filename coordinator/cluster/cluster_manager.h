#ifndef TESSERA_COORDINATOR_CLUSTER_CLUSTER_MANAGER_H_
#define TESSERA_COORDINATOR_CLUSTER_CLUSTER_MANAGER_H_

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/rendezvous/kv_store_server.h"
#include "coordinator/cluster/membership.h"
#include "coordinator/cluster/worker_group.h"
#include "coordinator/engine/engine.h"
#include "tessera/v1/worker.grpc.pb.h"

namespace tessera {

struct ClusterOptions {
  int tp = 1;
  int replicas = 1;
  GroupOptions group;  // rendezvous_address is filled in by the manager.
  std::string store_host = "127.0.0.1";
  // The rendezvous store's port (tp > 1 only); 0: any free port. A fixed port lets a
  // firewall (the chart's NetworkPolicy) open exactly it.
  int store_port = 0;
  // Workers call Heartbeat this often; one silent for session_timeout is dropped (and
  // its replica failed).
  std::chrono::milliseconds heartbeat_interval{500};
  std::chrono::milliseconds session_timeout{5000};
  // Workers must send this in kJoinSecretMetadataKey metadata (register and heartbeat);
  // empty: any worker that reaches the cluster port may join.
  std::string join_secret;
  // How the rendezvous store authenticates its clients (TLS files; the join secret is
  // added from join_secret).
  KvStoreSecurity store_security;
  // Registered workers not yet in a group at most; more registrations get
  // RESOURCE_EXHAUSTED, so a flood of them cannot grow memory. 0: 4 x tp x replicas.
  int max_pending_workers = 0;
};

// Accepts worker registrations and heartbeats (the Cluster service), forms `replicas`
// groups of `tp` workers as workers arrive (placed by their replica and rank hints), and
// hands each formed group to the engine. Every worker holds a session: when a replica
// fails, its surviving members are told to re-register, so the replica re-forms from them
// and a replacement; a worker that stops heartbeating is dropped.
class ClusterManager final : public v1::Cluster::Service {
 public:
  static absl::StatusOr<std::unique_ptr<ClusterManager>> Create(ClusterOptions options, Engine* engine);
  ~ClusterManager() override;

  grpc::Status RegisterWorker(grpc::ServerContext* context, const v1::RegisterWorkerRequest* request,
                              v1::RegisterWorkerResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override;

  // Registered workers not in a formed group (GetModelInfo's pending_workers).
  int PendingWorkers() const ABSL_LOCKS_EXCLUDED(mu_);
  // Not OK once a formation failed, before any replica formed, with an error that retrying
  // cannot fix (a setting the workers refuse, a model that does not fit; the status names
  // it): the coordinator should exit with it rather than reload the weights forever.
  absl::Status ConfigurationError() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // A replica handed to the engine, and whether the engine has shown it ready yet.
  struct Formed {
    std::vector<std::string> worker_ids;
    bool seen_ready = false;
    std::chrono::steady_clock::time_point added;
  };

  ClusterManager(ClusterOptions options, Engine* engine);
  void FormLoop();
  // Drops sessions that went silent and dissolves replicas the engine failed, so their
  // surviving workers re-register.
  void Housekeep(const std::vector<bool>& ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Drop(const std::string& id, const std::string& reason, const char* event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Event(const char* event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int CountPending() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK, or PERMISSION_DENIED (logged with the caller's address) without the join secret.
  grpc::Status CheckJoinSecret(const grpc::ServerContext& context, const std::string& address,
                               const char* call);

  ClusterOptions options_;
  Engine* engine_;
  std::unique_ptr<KvStoreServer> store_;
  const std::string instance_;  // Distinguishes this process's worker ids from a predecessor's.
  const int max_pending_;

  mutable absl::Mutex mu_;
  std::map<std::string, WorkerSession> workers_ ABSL_GUARDED_BY(mu_);  // By worker id.
  std::map<int, Formed> formed_ ABSL_GUARDED_BY(mu_);                  // By replica.
  // Why a worker id was dropped, told to it at its next heartbeat (bounded).
  std::map<std::string, std::string> dropped_ ABSL_GUARDED_BY(mu_);
  uint64_t num_registered_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool any_formed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status config_error_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread former_;
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CLUSTER_CLUSTER_MANAGER_H_
