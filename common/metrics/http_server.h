#ifndef TESSERA_COMMON_METRICS_HTTP_SERVER_H_
#define TESSERA_COMMON_METRICS_HTTP_SERVER_H_

#include <functional>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"

namespace tessera {

// The answer of a health endpoint: 200 "ok" when `ok`, else 503 with `detail`.
struct HealthResult {
  bool ok = false;
  std::string detail;
};

struct MetricsHttpOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port (see port()).
  // Scraped in order on GET /metrics (Prometheus text format 0.0.4).
  std::vector<std::weak_ptr<prometheus::Collectable>> collectables;
  // Extra plain-text endpoints, e.g. "/healthz", "/readyz". Called on the server thread.
  std::map<std::string, std::function<HealthResult()>> checks;
};

// A small HTTP/1.x server for /metrics plus health endpoints on one port, one request per
// connection, served in order by one thread (scrapes and probes are short).
// Why not prometheus-cpp's Exposer: it only serves collectables (always 200), and readiness
// must answer 503. Why not civetweb directly: Debian builds it with a fixed small thread
// stack, too small for the static TLS of the CUDA libraries the worker links (pthread_create
// fails with EINVAL).
class MetricsHttpServer {
 public:
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(MetricsHttpOptions options);
  ~MetricsHttpServer();

  int port() const { return port_; }

 private:
  MetricsHttpServer() = default;
  void Loop();
  void Serve(int fd);
  std::string Metrics() const;

  MetricsHttpOptions options_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace tessera

#endif  // TESSERA_COMMON_METRICS_HTTP_SERVER_H_
