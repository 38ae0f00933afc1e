#ifndef TESSERA_COORDINATOR_HTTP_HTTP_SERVER_H_
#define TESSERA_COORDINATOR_HTTP_HTTP_SERVER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
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
  // A connection that sends no (complete) request for this long is closed.
  int idle_timeout_seconds = 300;
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
// written to it.
class HttpServer {
 public:
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(HttpServerOptions options);
  ~HttpServer();

  int port() const;
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
