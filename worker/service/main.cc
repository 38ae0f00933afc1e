// tessera-worker: one tensor-parallel rank. Registers with the coordinator, then serves
// the Worker service (configure, load shard, init cache, execute steps).
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/flag_set.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "kernels/backend.h"
#include "tessera/v1/worker.grpc.pb.h"
#include "worker/service/worker_service.h"

namespace {

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop = true; }

int Fail(const std::string& message) {
  std::fprintf(stderr, "tessera-worker: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string coordinator, listen = "127.0.0.1:0", advertise_host = "127.0.0.1", device = "cpu";
  int64_t threads = 0, rank_hint = -1, replica_hint = -1;
  tessera::FlagSet flags("tessera-worker",
                         "One tensor-parallel rank of a Tessera cluster. It registers with the\n"
                         "coordinator, which assigns its group, rank and model shard.");
  flags.String("coordinator", &coordinator, "Coordinator address (host:port of its cluster port).");
  flags.String("listen", &listen, "Address to serve the Worker service on (port 0: any free port).");
  flags.String("advertise-host", &advertise_host, "Host name or IP peers and the coordinator use to reach this worker.");
  flags.String("device", &device, "Backend: cpu (cuda in CUDA builds, when the worker path lands).");
  flags.Int("threads", &threads, "CPU threads for kernels (0: one per core).");
  flags.Int("rank-hint", &rank_hint, "Preferred rank in its group (-1: any).");
  flags.Int("replica-hint", &replica_hint, "Preferred replica (-1: any).");
  if (auto s = flags.Parse(argc, argv); !s.ok()) return Fail(std::string(s.message()));
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (coordinator.empty()) return Fail("--coordinator is required");
  if (device != "cpu") return Fail(absl::StrCat("device \"", device, "\" is not supported by this worker build"));

  auto backend = tessera::kernels::MakeCpuBackend(static_cast<int>(threads));
  tessera::WorkerServiceImpl service(backend.get(), {advertise_host});
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(256 << 20);
  builder.SetMaxSendMessageSize(256 << 20);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) return Fail(absl::StrCat("cannot listen on ", listen));
  const std::string address = absl::StrCat(advertise_host, ":", port);
  std::fprintf(stderr, "tessera-worker: serving on %s\n", address.c_str());

  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);

  // Register, retrying while the coordinator starts.
  auto channel = grpc::CreateChannel(coordinator, grpc::InsecureChannelCredentials());
  auto stub = tessera::v1::Cluster::NewStub(channel);
  tessera::v1::RegisterWorkerRequest request;
  request.set_address(address);
  request.set_rank_hint(static_cast<int32_t>(rank_hint));
  request.set_replica_hint(static_cast<int32_t>(replica_hint));
  request.set_pid(static_cast<int32_t>(::getpid()));
  request.mutable_device()->set_kind("cpu");
  request.mutable_device()->set_free_memory_bytes(backend->FreeMemoryBytes());
  bool registered = false;
  for (int attempt = 0; attempt < 600 && !g_stop; ++attempt) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    tessera::v1::RegisterWorkerResponse response;
    grpc::Status s = stub->RegisterWorker(&ctx, request, &response);
    if (s.ok()) {
      std::fprintf(stderr, "tessera-worker: registered with %s as %s\n", coordinator.c_str(),
                   response.worker_id().c_str());
      registered = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (!registered) {
    server->Shutdown();
    return Fail(absl::StrCat("could not register with the coordinator at ", coordinator));
  }
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}
