// tessera-worker: one tensor-parallel rank. Registers with the coordinator, then serves
// the Worker service (configure, load shard, init cache, execute steps).
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/auth/secret.h"
#include "common/flag_set.h"
#include "common/tls/cluster_credentials.h"
#include "common/tls/cluster_security.h"
#include "common/grpc_channel.h"
#include "common/logging.h"
#include "common/metrics/http_server.h"
#include "common/metrics/process_collector.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "kernels/backend.h"
#include "tessera/v1/worker.grpc.pb.h"
#include "worker/backend_factory.h"
#include "worker/metrics/worker_metrics.h"
#include "worker/service/coordinator_session.h"
#include "worker/service/worker_service.h"

namespace {

std::atomic<bool> g_stop{false};
std::atomic<int64_t> g_last_tick_ms{0};  // The main loop's last turn, for /healthz.
std::atomic<tessera::CoordinatorSession*> g_session{nullptr};
std::atomic<tessera::WorkerServiceImpl*> g_service{nullptr};

// The gRPC health service name that reports readiness (in a formed group).
constexpr char kReadinessService[] = "tessera.v1.Worker";

bool Ready() {
  tessera::CoordinatorSession* session = g_session.load();
  tessera::WorkerServiceImpl* service = g_service.load();
  return session != nullptr && service != nullptr && session->connected() && service->in_group();
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void OnSignal(int) { g_stop = true; }

int Fail(const std::string& message) {
  std::fprintf(stderr, "tessera-worker: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string coordinator, listen = "127.0.0.1:0", advertise_host = "127.0.0.1", device = "cpu";
  int64_t threads = 0, rank_hint = -1, replica_hint = -1, metrics_port = 0;
  std::string metrics_host, log_format = "text", log_level = "info";
  tessera::FlagSet flags("tessera-worker",
                         "One tensor-parallel rank of a Tessera cluster. It registers with the\n"
                         "coordinator, which assigns its group, rank and model shard, and keeps\n"
                         "a session with it: when the coordinator restarts or the group loses a\n"
                         "peer, the worker leaves the group and registers again by itself.");
  flags.String("coordinator", &coordinator, "Coordinator address (host:port of its cluster port).");
  std::string join_secret_file;
  flags.String("join-secret-file", &join_secret_file,
               "File holding the cluster's join secret (the coordinator's --join-secret-file), sent when "
               "registering. Empty: none (a coordinator that requires one refuses this worker).");
  tessera::tls::ClusterSecurity cluster_security;
  tessera::tls::AddClusterSecurityFlags(flags, &cluster_security);
  flags.String("listen", &listen, "Address to serve the Worker service on (port 0: any free port).");
  flags.String("advertise-host", &advertise_host, "Host name or IP peers and the coordinator use to reach this worker.");
  flags.String("device", &device, "Backend: cpu, cuda (device 0), cuda:N, or auto (cuda when a device is usable, else cpu).");
  flags.Int("threads", &threads, "CPU threads for kernels (0: one per core).");
  flags.Int("rank-hint", &rank_hint, "Rank in its group (-1: any); a hinted worker takes only that rank.");
  flags.Int("replica-hint", &replica_hint,
            "Replica (group) to join (-1: any): workers with the same hint form one group, e.g. the\n"
            "StatefulSet ordinal / tp or the LeaderWorkerSet group index.");
  flags.Int("metrics-port", &metrics_port, "HTTP port of /metrics and /healthz (0: disabled).");
  flags.String("metrics-host", &metrics_host, "Address the metrics port binds to (empty: the --listen host).");
  flags.String("log-format", &log_format, "Log lines on stderr: text or json.");
  flags.String("log-level", &log_level, "Least severe level logged: debug, info, warning or error.");
  if (auto s = flags.Parse(argc, argv); !s.ok()) return Fail(std::string(s.message()));
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  std::string join_secret;  // Read before loading anything: a bad path fails at once.
  if (!join_secret_file.empty()) {
    auto secret = tessera::auth::ReadSecretFile(join_secret_file);
    if (!secret.ok()) return Fail(absl::StrCat("--join-secret-file: ", secret.status().message()));
    join_secret = *std::move(secret);
  }
  if (auto s = tessera::ConfigureLogging(log_format, log_level); !s.ok()) return Fail(std::string(s.message()));
  if (coordinator.empty()) return Fail("--coordinator is required");
  if (auto s = tessera::tls::ValidateClusterSecurity(cluster_security); !s.ok()) return Fail(std::string(s.message()));
  tessera::tls::LogClusterSecurity(cluster_security, "tessera-worker");

  auto made_backend = tessera::MakeBackend(device, static_cast<int>(threads));
  if (!made_backend.ok()) return Fail(std::string(made_backend.status().message()));
  std::unique_ptr<tessera::kernels::Backend> backend = std::move(*made_backend);
  const tessera::DeviceDescription device_info = tessera::DescribeBackend(*backend);
  std::fprintf(stderr,
               "tessera-worker: computing on %s (%s, %.1f of %.1f GB free, %s activations)\n",
               device_info.kind.c_str(), device_info.name.c_str(),
               device_info.free_memory_bytes / 1e9, device_info.total_memory_bytes / 1e9,
               tessera::DTypeName(backend->activation_dtype()));
  std::unique_ptr<tessera::WorkerMetrics> metrics;
  auto process = std::make_shared<tessera::ProcessCollector>();
  std::unique_ptr<tessera::MetricsHttpServer> metrics_server;
  if (metrics_port > 0) {
    metrics = std::make_unique<tessera::WorkerMetrics>();
    tessera::MetricsHttpOptions mo;
    mo.host = metrics_host.empty() ? listen.substr(0, listen.rfind(':')) : metrics_host;
    mo.port = static_cast<int>(metrics_port);
    mo.collectables = {metrics->registry(), process};
    mo.checks["/healthz"] = [] {
      const int64_t since = NowMs() - g_last_tick_ms.load();
      if (since > 10000) return tessera::HealthResult{false, absl::StrCat("main loop stalled for ", since, " ms")};
      return tessera::HealthResult{true, ""};
    };
    mo.checks["/readyz"] = [] {
      if (Ready()) return tessera::HealthResult{true, ""};
      return tessera::HealthResult{false, "not in a formed group (waiting for one, or re-registering)"};
    };
    g_last_tick_ms = NowMs();
    auto server = tessera::MetricsHttpServer::Start(std::move(mo));
    if (server.ok()) {
      metrics_server = std::move(*server);
      std::fprintf(stderr, "tessera-worker: metrics on port %d (/metrics, /healthz, /readyz)\n", metrics_server->port());
    } else {
      // As on the coordinator: a taken port costs the metrics endpoint, not the rank.
      std::fprintf(stderr, "tessera-worker: metrics endpoint disabled: %s\n",
                   std::string(server.status().message()).c_str());
    }
  }
  tessera::WorkerServiceOptions service_options;
  service_options.advertise_host = advertise_host;
  service_options.metrics = metrics.get();
  service_options.store_security = tessera::tls::StoreSecurity(cluster_security, join_secret);
  // KV transfers between replicas reach the other workers as the coordinator does.
  service_options.peer_credentials = tessera::tls::ClusterChannelCredentials(cluster_security);
  service_options.peer_server_name = cluster_security.insecure ? "" : cluster_security.server_name;
  tessera::WorkerServiceImpl service(backend.get(), std::move(service_options));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  // Only the coordinator and the other workers call this port (with their cluster
  // certificates under mutual TLS).
  builder.AddListeningPort(listen, tessera::tls::ClusterServerCredentials(cluster_security), &port);
  builder.SetMaxReceiveMessageSize(256 << 20);
  builder.SetMaxSendMessageSize(256 << 20);
  tessera::AllowClusterKeepalive(builder);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) return Fail(absl::StrCat("cannot listen on ", listen));
  const std::string address = absl::StrCat(advertise_host, ":", port);
  std::fprintf(stderr, "tessera-worker: serving on %s%s\n", address.c_str(),
               cluster_security.insecure ? " (plaintext, --insecure)" : " (mutual TLS)");

  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);

  // Membership: register, heartbeat, and register again whenever the session or the
  // group is lost (a coordinator restart, a dead peer), until SIGTERM.
  tessera::CoordinatorSessionOptions so;
  so.coordinator = coordinator;
  so.join_secret = join_secret;
  so.credentials = tessera::tls::ClusterChannelCredentials(cluster_security);
  so.server_name = cluster_security.insecure ? "" : cluster_security.server_name;
  tessera::v1::RegisterWorkerRequest& request = so.registration;
  request.set_address(address);
  request.set_rank_hint(static_cast<int32_t>(rank_hint));
  request.set_replica_hint(static_cast<int32_t>(replica_hint));
  request.set_pid(static_cast<int32_t>(::getpid()));
  request.mutable_device()->set_kind(device_info.kind);
  request.mutable_device()->set_name(device_info.name);
  request.mutable_device()->set_total_memory_bytes(device_info.total_memory_bytes);
  request.mutable_device()->set_free_memory_bytes(backend->FreeMemoryBytes());
  request.mutable_device()->set_device_id(device_info.device_id);
  tessera::CoordinatorSession session(std::move(so), &service);
  g_session = &session;
  g_service = &service;
  // Readiness (the chart's readinessProbe asks this gRPC health service): in a formed
  // group with a live session. The overall status stays SERVING while the process runs
  // (startup probe, the coordinator's rank probe).
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  bool ready_published = false;
  health->SetServingStatus(kReadinessService, false);
  absl::Status run = session.Run(g_stop, [&] {
    g_last_tick_ms = NowMs();
    const bool ready = Ready();
    if (ready != ready_published) {
      health->SetServingStatus(kReadinessService, ready);
      ready_published = ready;
    }
  });
  if (!run.ok()) {
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    return Fail(std::string(run.message()));
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  metrics_server.reset();
  // A step handler may still be blocked in a collective whose peer died; the worker keeps
  // no durable state, so leave without waiting for it.
  std::fflush(nullptr);
  std::_Exit(0);
}
