#include "common/net/connection_limits.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace tessera::net {

void ConnectionLimits::AddFlags(FlagSet& flags) {
  flags.Int("max-connections", &max_connections,
            "Connections open at once on each public port (gRPC, HTTP); more are closed at accept. Clipped to 2/5 "
            "of the descriptors left after --fd-reserve.");
  flags.Int("cluster-max-connections", &cluster_max_connections,
            "Connections open at once on the worker-facing port (clipped to 1/10 of the descriptor budget).");
  flags.Int("handshake-timeout-seconds", &handshake_timeout_seconds,
            "A connection that has not completed its TLS (or gRPC HTTP/2) handshake by then is closed.");
  flags.Int("header-timeout-seconds", &header_timeout_seconds,
            "HTTP: a request's headers must all arrive within this long (slowloris clients are closed).");
  flags.Int("idle-timeout-seconds", &idle_timeout_seconds,
            "A connection with no request in flight is closed after this long (HTTP keep-alive, gRPC idle "
            "connections); an HTTP write that makes no progress for this long ends its connection.");
  flags.Int("min-request-bytes-per-second", &min_request_bytes_per_second,
            "HTTP: a request body must arrive at least this fast on average (never less time than "
            "--header-timeout-seconds).");
  flags.Int("fd-reserve", &fd_reserve,
            "File descriptors that connections never take, kept for model files, worker channels and logs "
            "(0: max(64, limit / 8)). The soft RLIMIT_NOFILE is raised to the hard limit at start.");
}

absl::Status ConnectionLimits::Validate() const {
  for (const auto& [name, value] : {std::pair<const char*, int64_t>{"--max-connections", max_connections},
                                    {"--cluster-max-connections", cluster_max_connections},
                                    {"--handshake-timeout-seconds", handshake_timeout_seconds},
                                    {"--header-timeout-seconds", header_timeout_seconds},
                                    {"--idle-timeout-seconds", idle_timeout_seconds},
                                    {"--min-request-bytes-per-second", min_request_bytes_per_second}}) {
    if (value < 1) return absl::InvalidArgumentError(absl::StrCat(name, " must be positive, got ", value));
  }
  if (fd_reserve < 0) return absl::InvalidArgumentError(absl::StrCat("--fd-reserve must be >= 0, got ", fd_reserve));
  return absl::OkStatus();
}

ConnectionLimits::Caps ConnectionLimits::CapsUnder(const FdBudget& budget) const {
  const int64_t total = budget.connections();
  Caps caps;
  caps.grpc = std::max<int64_t>(1, std::min<int64_t>(max_connections, total * 2 / 5));
  caps.http = caps.grpc;
  caps.cluster = std::max<int64_t>(1, std::min<int64_t>(cluster_max_connections, total / 10));
  return caps;
}

void LogConnectionCaps(const FdBudget& budget, const ConnectionLimits::Caps& caps) {
  Log(LogLevel::kInfo, "listener", "connection limits",
      {{"fd_limit", int64_t{budget.limit}},
       {"fd_reserve", int64_t{budget.reserve}},
       {"grpc_max_connections", caps.grpc},
       {"http_max_connections", caps.http},
       {"cluster_max_connections", caps.cluster}});
}

}  // namespace tessera::net
