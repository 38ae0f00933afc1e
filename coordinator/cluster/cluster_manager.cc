#include "coordinator/cluster/cluster_manager.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/auth/secret.h"
#include "common/logging.h"
#include "coordinator/metrics/engine_metrics.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

// How long a replica handed to the engine may take to show ready before it counts as
// failed (the engine's warm-up is one token).
constexpr auto kReadyGrace = std::chrono::seconds(10);

// Form failures that the same workers would hit again: a setting they cannot honour (an
// impossible --gpu-memory-utilization, an unknown communicator) or a model that does not
// fit. Unavailable peers, deadlines and restarts are worth retrying.
bool IsConfigurationError(absl::StatusCode code) {
  return code == absl::StatusCode::kInvalidArgument ||
         code == absl::StatusCode::kResourceExhausted || code == absl::StatusCode::kUnimplemented;
}

void LogStartup(int replica, const ReplicaStartup& s) {
  constexpr double kGiB = 1 << 30;
  std::fprintf(stderr,
               "tessera-coordinator: replica %d formed: load %.1f s, warm-up %.1f s; per rank at "
               "most: weights %.2f GiB, KV cache %.2f GiB, workspace %.2f GiB, %u graphs %.2f GiB, "
               "activation reserve %.2f GiB, device %.2f GiB\n",
               replica, s.load_seconds, s.warmup_seconds, s.weight_bytes / kGiB,
               s.kv_cache_bytes / kGiB, s.workspace_bytes / kGiB, s.graphs_captured,
               s.graph_bytes / kGiB, s.activation_reserve_bytes / kGiB,
               s.device_total_bytes / kGiB);
}

std::string NewInstanceId() {
  return absl::StrCat(
      absl::Hex(static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()) &
                0xffffffffffULL));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ClusterManager>> ClusterManager::Create(ClusterOptions options,
                                                                       Engine* engine) {
  auto m = std::unique_ptr<ClusterManager>(new ClusterManager(std::move(options), engine));
  if (m->options_.tp > 1) {
    KvStoreSecurity store_security = m->options_.store_security;
    store_security.join_secret = m->options_.join_secret;
    auto store = KvStoreServer::Start(m->options_.store_host, m->options_.store_port, std::move(store_security));
    if (!store.ok()) return store.status();
    m->store_ = std::move(*store);
    m->options_.group.rendezvous_address = absl::StrCat(m->options_.store_host, ":", m->store_->port());
  }
  m->former_ = std::thread([p = m.get()] { p->FormLoop(); });
  return m;
}

ClusterManager::ClusterManager(ClusterOptions options, Engine* engine)
    : options_(std::move(options)),
      engine_(engine),
      instance_(NewInstanceId()),
      max_pending_(options_.max_pending_workers > 0 ? options_.max_pending_workers
                                                     : 4 * options_.tp * options_.replicas) {}

ClusterManager::~ClusterManager() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (former_.joinable()) former_.join();
}

void ClusterManager::Event(const char* event) {
  if (engine_->metrics() != nullptr) engine_->metrics()->MembershipEvent(event);
}

grpc::Status ClusterManager::CheckJoinSecret(const grpc::ServerContext& context, const std::string& address,
                                             const char* call) {
  if (options_.join_secret.empty()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  const auto sent = metadata.find(auth::kJoinSecretMetadataKey);
  const absl::string_view presented =
      sent == metadata.end() ? absl::string_view() : absl::string_view(sent->second.data(), sent->second.size());
  if (auth::SecretMatches(options_.join_secret, presented)) return grpc::Status::OK;
  const char* why = sent == metadata.end() ? "no join secret" : "a wrong join secret";
  Log(LogLevel::kWarning, "tessera-coordinator", "worker refused: bad join secret",
      {{"call", call}, {"why", why}, {"address", address}, {"peer", context.peer()}});
  Event("refused");
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      absl::StrCat("this coordinator requires the cluster's join secret (--join-secret-file); the "
                                   "worker sent ", why));
}

grpc::Status ClusterManager::RegisterWorker(grpc::ServerContext* context, const v1::RegisterWorkerRequest* request,
                                            v1::RegisterWorkerResponse* response) {
  if (grpc::Status s = CheckJoinSecret(*context, request->address(), "RegisterWorker"); !s.ok()) return s;
  if (request->address().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "address = \"\": the worker must say where it listens");
  }
  if (request->replica_hint() >= options_.replicas) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("replica_hint = ", request->replica_hint(), ": this coordinator serves ",
                                     options_.replicas, " replicas (hints 0 to ", options_.replicas - 1,
                                     ", or -1 for any)"));
  }
  if (request->rank_hint() >= options_.tp) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("rank_hint = ", request->rank_hint(), ": groups have tp = ", options_.tp,
                                     " ranks (hints 0 to ", options_.tp - 1, ", or -1 for any)"));
  }
  absl::MutexLock lock(&mu_);
  // The same address again: that worker restarted (or left its group). Whatever it held
  // is gone, so is the replica it served.
  for (auto it = workers_.begin(); it != workers_.end(); ++it) {
    if (it->second.registration.address() != request->address()) continue;
    const int replica = it->second.replica;
    Drop(it->first, "the worker registered again", "dissolved");
    if (replica >= 0) {
      engine_->FailReplica(replica, absl::UnavailableError(absl::StrCat(
                                        "worker ", request->address(), " restarted")));
    }
    break;
  }
  if (const int waiting = CountPending(); waiting >= max_pending_) {
    Log(LogLevel::kWarning, "tessera-coordinator", "worker refused: too many workers waiting for a group",
        {{"address", request->address()}, {"peer", context->peer()}, {"waiting", int64_t{waiting}}});
    Event("refused");
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat(waiting, " workers already wait for a group (--max-pending-workers ",
                                     max_pending_, "); try again later"));
  }
  const std::string id = absl::StrCat("worker-", instance_, "-", ++num_registered_);
  WorkerSession& w = workers_[id];
  w.registration = *request;
  w.registration.set_worker_id(id);
  w.order = num_registered_;
  w.last_seen = Clock::now();
  response->set_worker_id(id);
  response->set_heartbeat_interval_ms(static_cast<uint32_t>(options_.heartbeat_interval.count()));
  response->set_session_timeout_ms(static_cast<uint32_t>(options_.session_timeout.count()));
  const int waiting = CountPending();
  std::fprintf(stderr,
               "tessera-coordinator: worker %s registered as %s (replica hint %d, rank hint %d; %d waiting "
               "for a group)\n",
               request->address().c_str(), id.c_str(), request->replica_hint(), request->rank_hint(), waiting);
  Event("registered");
  if (engine_->metrics() != nullptr) engine_->metrics()->SetPendingWorkers(waiting);
  return grpc::Status::OK;
}

grpc::Status ClusterManager::Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest* request,
                                       v1::HeartbeatResponse* response) {
  if (grpc::Status s = CheckJoinSecret(*context, request->address(), "Heartbeat"); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(request->worker_id());
  if (it == workers_.end()) {
    response->set_known(false);
    auto d = dropped_.find(request->worker_id());
    if (d != dropped_.end()) {
      response->set_reason(d->second);
      dropped_.erase(d);
    } else {
      response->set_reason(absl::StrCat("worker id \"", request->worker_id(),
                                        "\" is unknown to this coordinator (it restarted)"));
    }
    return grpc::Status::OK;
  }
  it->second.last_seen = Clock::now();
  response->set_known(true);
  return grpc::Status::OK;
}

void ClusterManager::Drop(const std::string& id, const std::string& reason, const char* event) {
  workers_.erase(id);
  if (dropped_.size() > 4096) dropped_.clear();  // Only a courtesy; the worker re-registers anyway.
  dropped_[id] = reason;
  Event(event);
}

void ClusterManager::Housekeep(const std::vector<bool>& ready) {
  const auto now = Clock::now();
  // Replicas the engine failed (or never showed ready): dissolve them so their surviving
  // ranks drop the dead group and register again.
  for (auto it = formed_.begin(); it != formed_.end();) {
    const int replica = it->first;
    Formed& f = it->second;
    if (ready[replica]) {
      f.seen_ready = true;
      ++it;
      continue;
    }
    if (!f.seen_ready && now - f.added < kReadyGrace) {
      ++it;
      continue;
    }
    std::fprintf(stderr, "tessera-coordinator: replica %d is down; its workers re-register\n", replica);
    for (const std::string& id : f.worker_ids) {
      if (workers_.count(id) > 0) Drop(id, absl::StrCat("replica ", replica, " failed"), "dissolved");
    }
    it = formed_.erase(it);
  }
  // Silent sessions: a waiting worker is forgotten, a serving one fails its replica.
  std::vector<std::pair<std::string, int>> expired;
  for (const auto& [id, w] : workers_) {
    if (now - w.last_seen > options_.session_timeout) expired.emplace_back(id, w.replica);
  }
  for (const auto& [id, replica] : expired) {
    const std::string address = workers_[id].registration.address();
    std::fprintf(stderr, "tessera-coordinator: worker %s (%s) sent no heartbeat for %lld ms; dropped\n",
                 address.c_str(), id.c_str(), static_cast<long long>(options_.session_timeout.count()));
    Drop(id, "no heartbeat within the session timeout", "expired");
    if (replica >= 0) {
      engine_->FailReplica(replica, absl::UnavailableError(absl::StrCat(
                                        "worker ", address, " stopped heartbeating")));
    }
  }
  if (engine_->metrics() != nullptr) engine_->metrics()->SetPendingWorkers(CountPending());
}

int ClusterManager::CountPending() const {
  int waiting = 0;
  for (const auto& [_, s] : workers_) waiting += s.replica < 0;
  return waiting;
}

absl::Status ClusterManager::ConfigurationError() const {
  absl::MutexLock lock(&mu_);
  return config_error_;
}

int ClusterManager::PendingWorkers() const {
  absl::MutexLock lock(&mu_);
  return CountPending();
}

void ClusterManager::FormLoop() {
  while (true) {
    std::vector<std::string> ids;
    std::vector<v1::RegisterWorkerRequest> members;
    int replica = -1;
    uint64_t generation = 0;
    {
      std::vector<bool> ready(options_.replicas, false);
      for (const ReplicaSnapshot& r : engine_->Snapshot()) {
        if (r.replica < options_.replicas && r.ready) ready[r.replica] = true;
      }
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::Milliseconds(100));
      if (stop_) return;
      Housekeep(ready);
      if (!config_error_.ok()) continue;  // The coordinator exits with it; nothing more forms.
      // The lowest replica index that is not serving and whose workers are here.
      for (int i = 0; i < options_.replicas && replica < 0; ++i) {
        if (ready[i] || formed_.count(i) > 0) continue;
        auto picked = PickGroup(workers_, i, options_.tp);
        if (!picked.has_value()) continue;
        replica = i;
        ids = *std::move(picked);
      }
      if (replica < 0) continue;  // Nothing to form; extra workers wait as spares.
      for (const std::string& id : ids) {
        workers_[id].replica = replica;
        members.push_back(workers_[id].registration);
      }
      generation = ++generation_;
    }
    std::vector<std::string> addresses;
    std::vector<v1::DeviceInfo> devices;
    for (const auto& m : members) {
      addresses.push_back(m.address());
      devices.push_back(m.device());
    }
    std::fprintf(stderr, "tessera-coordinator: forming replica %d from %zu workers\n", replica,
                 addresses.size());
    auto group = std::make_unique<WorkerGroup>(replica, addresses, options_.group, devices);
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
      // Every member registers again (a dead one does not), so the replica re-forms from
      // the live ones.
      absl::MutexLock lock(&mu_);
      // Before anything served, retrying a setting the workers refuse would only reload
      // the weights in a loop: the coordinator exits with the error instead (vLLM fails
      // its startup the same way). Later, the replicas that serve matter more.
      if (!any_formed_ && config_error_.ok() && IsConfigurationError(capacity.status().code())) {
        config_error_ = absl::Status(capacity.status().code(),
                                     absl::StrCat("forming replica ", replica, " failed: ",
                                                  capacity.status().message()));
      }
      for (const std::string& id : ids) {
        if (workers_.count(id) > 0) {
          Drop(id, absl::StrCat("forming replica ", replica, " failed: ", capacity.status().message()),
               "form_failed");
        }
      }
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      bool intact = true;  // A member may have re-registered (restarted) while loading.
      for (const std::string& id : ids) intact &= workers_.count(id) > 0;
      if (!intact) {
        for (const std::string& id : ids) {
          if (workers_.count(id) > 0) Drop(id, "a group member restarted while forming", "form_failed");
        }
        continue;
      }
      formed_[replica] = Formed{ids, false, Clock::now()};
      any_formed_ = true;
      Event("formed");
    }
    LogStartup(replica, group->startup());
    engine_->AddReplica(std::move(group), capacity->num_blocks, capacity->num_host_blocks);
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
