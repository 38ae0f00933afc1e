#include "coordinator/cluster/cluster_manager.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace tessera {

absl::StatusOr<std::unique_ptr<ClusterManager>> ClusterManager::Create(ClusterOptions options,
                                                                       Engine* engine) {
  auto m = std::unique_ptr<ClusterManager>(new ClusterManager(std::move(options), engine));
  if (m->options_.tp > 1) {
    auto store = KvStoreServer::Start(m->options_.store_host, m->options_.store_port);
    if (!store.ok()) return store.status();
    m->store_ = std::move(*store);
    m->options_.group.rendezvous_address = absl::StrCat(m->options_.store_host, ":", m->store_->port());
  }
  m->former_ = std::thread([p = m.get()] { p->FormLoop(); });
  return m;
}

ClusterManager::ClusterManager(ClusterOptions options, Engine* engine)
    : options_(std::move(options)), engine_(engine) {}

ClusterManager::~ClusterManager() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (former_.joinable()) former_.join();
}

grpc::Status ClusterManager::RegisterWorker(grpc::ServerContext*, const v1::RegisterWorkerRequest* request,
                                            v1::RegisterWorkerResponse* response) {
  if (request->address().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "address = \"\": the worker must say where it listens");
  }
  absl::MutexLock lock(&mu_);
  ++num_registered_;
  response->set_worker_id(absl::StrCat("worker-", num_registered_));
  pending_.push_back(*request);
  std::fprintf(stderr, "tessera-coordinator: worker %s registered (%zu waiting for a group)\n",
               request->address().c_str(), pending_.size());
  return grpc::Status::OK;
}

void ClusterManager::FormLoop() {
  while (true) {
    std::vector<v1::RegisterWorkerRequest> members;
    int replica = -1;
    uint64_t generation = 0;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || static_cast<int>(pending_.size()) >= options_.tp;
      };
      mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(200));
      if (stop_) return;
      if (static_cast<int>(pending_.size()) < options_.tp) continue;
      // The lowest replica index that is not serving.
      std::vector<bool> serving(options_.replicas, false);
      for (const ReplicaSnapshot& r : engine_->Snapshot()) {
        if (r.replica < options_.replicas && r.ready) serving[r.replica] = true;
      }
      for (int i = 0; i < options_.replicas; ++i) {
        if (!serving[i]) {
          replica = i;
          break;
        }
      }
      if (replica < 0) continue;  // Every replica serves: extra workers wait as spares.
      // Rank hints first, then arrival order.
      std::stable_sort(pending_.begin(), pending_.end(), [](const auto& a, const auto& b) {
        const int ra = a.rank_hint() < 0 ? 1 << 30 : a.rank_hint();
        const int rb = b.rank_hint() < 0 ? 1 << 30 : b.rank_hint();
        return ra < rb;
      });
      members.assign(pending_.begin(), pending_.begin() + options_.tp);
      pending_.erase(pending_.begin(), pending_.begin() + options_.tp);
      generation = ++generation_;
    }
    std::vector<std::string> addresses;
    std::vector<std::string> device_kinds;
    for (const auto& m : members) {
      addresses.push_back(m.address());
      device_kinds.push_back(m.device().kind());
    }
    std::fprintf(stderr, "tessera-coordinator: forming replica %d from %zu workers\n", replica,
                 addresses.size());
    auto group = std::make_unique<WorkerGroup>(replica, addresses, options_.group, device_kinds);
    int last_percent = -1;
    auto capacity = group->Form(generation, [&](int rank, int done, int total) {
      if (rank != 0 || total == 0) return;
      const int percent = 100 * done / total;
      if (percent / 25 != last_percent / 25) {
        std::fprintf(stderr, "tessera-coordinator: replica %d loading %d%%\n", replica, percent);
        last_percent = percent;
      }
    });
    if (store_ != nullptr) store_->EraseKeysWithPrefix(absl::StrCat("replica", replica, "/gen", generation));
    if (!capacity.ok()) {
      std::fprintf(stderr, "tessera-coordinator: forming replica %d failed: %s\n", replica,
                   std::string(capacity.status().message()).c_str());
      continue;  // Those workers are dropped; new registrations may form it later.
    }
    engine_->AddReplica(std::move(group), capacity->num_blocks);
    // Give the engine a moment to publish the replica before forming the next one.
    for (int i = 0; i < 50; ++i) {
      bool seen = false;
      for (const ReplicaSnapshot& r : engine_->Snapshot()) seen |= r.replica == replica && r.ready;
      if (seen) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

}  // namespace tessera
