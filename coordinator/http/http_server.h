#ifndef TESSERA_COORDINATOR_HTTP_HTTP_SERVER_H_
#define TESSERA_COORDINATOR_HTTP_HTTP_SERVER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/net/listener_stats.h"
#include "coordinator/http/http_exchange.h"
#include "coordinator/tls/tls_options.h"

namespace tessera::http {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port (see HttpServer::port()).
  // I/O threads. Connections wait on asio, not on threads: a few threads serve thousands
  // of open streams.
  int num_threads = 2;
  // Bodies beyond this are refused with 413 before they are read.
  uint64_t max_body_bytes = 1 << 20;
  // SO_SNDBUF of every connection (0: the kernel's autotuning); see http_server.cc.
  int send_buffer_bytes = 256 << 10;
  // Connections open at once at most (the descriptor reserve of common/net/fd_budget.h
  // applies on top); more are closed at accept.
  int64_t max_connections = 4096;
  // TLS: a connection that has not completed its handshake after this long is closed.
  int handshake_timeout_seconds = 10;
  // A request's headers must all arrive within this long of its first byte (of the
  // connection, for its first request): a client that trickles them (slowloris) is closed.
  int header_timeout_seconds = 10;
  // Between requests, a keep-alive connection waits this long for the next one; a write
  // that makes no progress for this long (a client that stopped reading) ends it too.
  int idle_timeout_seconds = 60;
  // A body must arrive at least this fast (bytes per second, averaged over the body; never
  // less time than header_timeout_seconds): a client that trickles its body is closed.
  int64_t min_body_bytes_per_second = 8192;
  // Enabled: HTTPS only, with the files reloaded when they change (new connections).
  tls::TlsFiles tls;
  // Called on the exchange's strand for every request read.
  std::function<void(std::shared_ptr<HttpExchange>)> handler;
  // The body of an error the server answers by itself (400 malformed HTTP, 413, 431), as
  // (status, message) -> JSON.
  std::function<std::string(int, const std::string&)> error_body;
};

// An HTTP/1.1 server on Boost.Beast: asynchronous reads and writes on an asio io_context,
// one strand per connection, keep-alive, chunked streaming, and a watch on the socket
// while a request runs, so a client that goes away is noticed even when nothing is being
// written to it. Hardened for a hostile network: a connection cap, the process's
// descriptor reserve, deadlines for the TLS handshake, the headers and the body (by a
// minimum rate), an idle timeout, shedding when the process is out of descriptors, and a
// listening socket that is reopened if it fails.
class HttpServer {
 public:
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(HttpServerOptions options);
  ~HttpServer();

  int port() const;
  // Open connections, refusals and whether the port accepts (readiness, metrics).
  const net::ListenerStats& stats() const;
  // Stops accepting, waits up to `grace` for requests in flight to be answered, and
  // stops the I/O threads; open connections are dropped when the server is destroyed.
  // Idempotent.
  void Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(0));

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::http

#endif  // TESSERA_COORDINATOR_HTTP_HTTP_SERVER_H_
