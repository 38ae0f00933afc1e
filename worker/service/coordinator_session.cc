#include "worker/service/coordinator_session.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/auth/secret.h"
#include "common/grpc_channel.h"
#include "common/grpc_status.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

std::chrono::system_clock::time_point In(std::chrono::milliseconds d) {
  return std::chrono::system_clock::now() + d;
}

}  // namespace

CoordinatorSession::CoordinatorSession(CoordinatorSessionOptions options, WorkerServiceImpl* service)
    : options_(std::move(options)),
      service_(service),
      stub_(v1::Cluster::NewStub(
          ClusterChannel(options_.coordinator, options_.credentials, options_.server_name))) {}

void CoordinatorSession::SleepFor(std::chrono::milliseconds d, const std::atomic<bool>& stop,
                                  const std::function<void()>& tick) {
  const auto until = Clock::now() + d;
  while (!stop && Clock::now() < until) {
    tick();
    std::this_thread::sleep_for(std::min<Clock::duration>(std::chrono::milliseconds(50), until - Clock::now()));
  }
}

absl::Status CoordinatorSession::Run(const std::atomic<bool>& stop, const std::function<void()>& tick) {
  while (!stop) {
    absl::StatusOr<bool> registered = Register(stop, tick);
    if (!registered.ok()) return registered.status();
    if (!*registered) break;
    const std::string lost = Heartbeat(stop, tick);
    connected_ = false;
    if (stop) break;
    std::fprintf(stderr, "tessera-worker: session with %s lost (%s); registering again\n",
                 options_.coordinator.c_str(), lost.c_str());
    service_->Leave(lost);
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> CoordinatorSession::Register(const std::atomic<bool>& stop,
                                                  const std::function<void()>& tick) {
  // Jittered exponential backoff, so a fleet of workers does not hammer a coordinator
  // that is coming back all in the same instant.
  std::minstd_rand rng(static_cast<unsigned>(options_.registration.pid()) ^
                       static_cast<unsigned>(Clock::now().time_since_epoch().count()));
  std::chrono::milliseconds backoff(100);
  std::string last_error;
  for (int attempt = 0; !stop; ++attempt) {
    tick();
    grpc::ClientContext ctx;
    ctx.set_deadline(In(std::chrono::seconds(2)));
    if (!options_.join_secret.empty()) ctx.AddMetadata(auth::kJoinSecretMetadataKey, options_.join_secret);
    v1::RegisterWorkerResponse response;
    grpc::Status s = stub_->RegisterWorker(&ctx, options_.registration, &response);
    if (s.ok()) {
      worker_id_ = response.worker_id();
      if (response.heartbeat_interval_ms() > 0) interval_ = std::chrono::milliseconds(response.heartbeat_interval_ms());
      if (response.session_timeout_ms() > 0) session_timeout_ = std::chrono::milliseconds(response.session_timeout_ms());
      connected_ = true;
      std::fprintf(stderr, "tessera-worker: registered with %s as %s\n", options_.coordinator.c_str(),
                   worker_id_.c_str());
      return true;
    }
    // Retrying cannot fix a refused secret: say so and stop.
    if (s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
        s.error_code() == grpc::StatusCode::PERMISSION_DENIED ||
        s.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
      return absl::InvalidArgumentError(absl::StrCat("the coordinator at ", options_.coordinator,
                                                     " refused this worker: ", s.error_message()));
    }
    if (attempt % 25 == 0 && s.error_message() != last_error) {
      std::fprintf(stderr, "tessera-worker: cannot register with %s yet: %s\n", options_.coordinator.c_str(),
                   s.error_message().c_str());
      last_error = s.error_message();
    }
    std::uniform_int_distribution<int> jitter(0, static_cast<int>(backoff.count() / 4));
    SleepFor(backoff + std::chrono::milliseconds(jitter(rng)), stop, tick);
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
  return false;
}

std::string CoordinatorSession::Heartbeat(const std::atomic<bool>& stop, const std::function<void()>& tick) {
  auto last_ok = Clock::now();
  std::string last_error = "no answer";
  while (!stop) {
    SleepFor(interval_, stop, tick);
    if (stop) break;
    v1::HeartbeatRequest request;
    request.set_worker_id(worker_id_);
    request.set_address(options_.registration.address());
    request.set_in_group(service_->in_group());
    v1::HeartbeatResponse response;
    grpc::ClientContext ctx;
    ctx.set_deadline(In(std::max(interval_ * 2, std::chrono::milliseconds(1000))));
    if (!options_.join_secret.empty()) ctx.AddMetadata(auth::kJoinSecretMetadataKey, options_.join_secret);
    grpc::Status s = stub_->Heartbeat(&ctx, request, &response);
    if (s.ok() && !response.known()) return absl::StrCat("the coordinator says: ", response.reason());
    if (s.ok()) {
      last_ok = Clock::now();
      connected_ = true;
      continue;
    }
    last_error = s.error_message();
    const auto silent = Clock::now() - last_ok;
    // Under a session timeout the coordinator may just be busy; past it, it has dropped
    // this worker anyway (or is gone), so the group is dead either way.
    if (silent > session_timeout_) {
      return absl::StrCat("no heartbeat answer for ",
                          std::chrono::duration_cast<std::chrono::milliseconds>(silent).count(),
                          " ms: ", last_error);
    }
  }
  return "stopping";
}

}  // namespace tessera
