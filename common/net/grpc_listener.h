#ifndef TESSERA_COMMON_NET_GRPC_LISTENER_H_
#define TESSERA_COMMON_NET_GRPC_LISTENER_H_

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>

#include "absl/status/statusor.h"
#include "common/net/listener_stats.h"
#include "grpcpp/server_builder.h"

namespace tessera::net {

struct GrpcListenerOptions {
  std::string name = "grpc";  // In logs, metrics and readiness.
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port (see port()).
  // Connections open at once at most; more are closed at accept. The descriptor reserve
  // (fd_budget.h) applies on top.
  int64_t max_connections = 4096;
};

// A gRPC server's listening socket with our own accept loop, in place of
// ServerBuilder::AddListeningPort: accepted connections are handed to the server through
// its external-connection acceptor (same credentials and handshakes). gRPC 1.51's own
// listener gives up for good on the first EMFILE and cannot cap connections; this one caps
// them, keeps the descriptor reserve, sheds connections when the process is out of
// descriptors, and reopens its socket if it fails (readiness is off meanwhile).
class GrpcListener {
 public:
  // Binds and listens at once, so the port is known before the server is built.
  static absl::StatusOr<std::unique_ptr<GrpcListener>> Bind(GrpcListenerOptions options);
  ~GrpcListener();

  // Registers the listener with `builder` (call before BuildAndStart) ...
  void AddTo(grpc::ServerBuilder& builder, std::shared_ptr<grpc::ServerCredentials> credentials);
  // ... and, once the server is started, begins accepting.
  void Start();
  // Stops accepting and closes the socket; call before the server shuts down (a
  // connection handed to a server that is shutting down is dropped by gRPC). Idempotent.
  void Stop();

  int port() const { return stats_.port.load(); }
  const ListenerStats& stats() const { return stats_; }

  // The listening socket, for tests that break it (shutdown() makes accept fail).
  int listen_fd_for_testing() const { return listen_fd_.load(); }

 private:
  explicit GrpcListener(GrpcListenerOptions options) : options_(std::move(options)) {}
  void Loop();
  void AcceptPending();
  void Hand(int fd);
  // Drops connections gRPC has closed: a tracked descriptor that no longer names the same
  // socket (fstat's inode) was closed, and maybe reused.
  void Sweep();
  void Reopen();

  const GrpcListenerOptions options_;
  ListenerStats stats_;
  RefusalLog refusals_;
  std::atomic<int> listen_fd_{-1};
  int wake_fd_ = -1;  // eventfd: Stop() wakes the loop.
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor_;
  std::unordered_map<int, ino_t> connections_;  // fd -> socket inode; loop thread only.
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace tessera::net

#endif  // TESSERA_COMMON_NET_GRPC_LISTENER_H_
