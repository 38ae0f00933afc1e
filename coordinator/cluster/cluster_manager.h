#ifndef TESSERA_COORDINATOR_CLUSTER_CLUSTER_MANAGER_H_
#define TESSERA_COORDINATOR_CLUSTER_CLUSTER_MANAGER_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/rendezvous/kv_store_server.h"
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
};

// Accepts worker registrations (the Cluster service), forms `replicas` groups of `tp`
// workers as workers arrive, and hands each formed group to the engine. A failed replica
// is formed again from workers that register later.
class ClusterManager final : public v1::Cluster::Service {
 public:
  static absl::StatusOr<std::unique_ptr<ClusterManager>> Create(ClusterOptions options, Engine* engine);
  ~ClusterManager() override;

  grpc::Status RegisterWorker(grpc::ServerContext* context, const v1::RegisterWorkerRequest* request,
                              v1::RegisterWorkerResponse* response) override;

 private:
  ClusterManager(ClusterOptions options, Engine* engine);
  void FormLoop();

  ClusterOptions options_;
  Engine* engine_;
  std::unique_ptr<KvStoreServer> store_;

  mutable absl::Mutex mu_;
  std::vector<v1::RegisterWorkerRequest> pending_ ABSL_GUARDED_BY(mu_);
  int num_registered_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread former_;
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CLUSTER_CLUSTER_MANAGER_H_
