#ifndef TESSERA_COMMON_METRICS_HTTP_SERVER_H_
#define TESSERA_COMMON_METRICS_HTTP_SERVER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"

class CivetServer;

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
  // Extra plain-text endpoints, e.g. "/healthz", "/readyz". Called on the server's threads.
  std::map<std::string, std::function<HealthResult()>> checks;
};

// A small HTTP server for /metrics plus health endpoints on one port. prometheus-cpp's
// Exposer only serves collectables (always 200), so readiness, which must answer 503,
// needs its own handler; both live on one civetweb server here.
class MetricsHttpServer {
 public:
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(MetricsHttpOptions options);
  ~MetricsHttpServer();

  int port() const { return port_; }

 private:
  class Handler;
  MetricsHttpServer() = default;

  MetricsHttpOptions options_;
  std::vector<std::unique_ptr<Handler>> handlers_;
  std::unique_ptr<CivetServer> server_;
  int port_ = 0;
};

}  // namespace tessera

#endif  // TESSERA_COMMON_METRICS_HTTP_SERVER_H_
