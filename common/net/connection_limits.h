#ifndef TESSERA_COMMON_NET_CONNECTION_LIMITS_H_
#define TESSERA_COMMON_NET_CONNECTION_LIMITS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/flag_set.h"
#include "common/net/fd_budget.h"

namespace tessera::net {

// The coordinator's connection flags: caps per port and the deadlines every port applies
// (the HTTP API all of them, gRPC the handshake and idle ones).
struct ConnectionLimits {
  int64_t max_connections = 4096;          // Each public port (gRPC, HTTP).
  int64_t cluster_max_connections = 1024;  // The worker-facing gRPC port.
  int64_t handshake_timeout_seconds = 10;
  int64_t header_timeout_seconds = 10;
  int64_t idle_timeout_seconds = 60;
  int64_t min_request_bytes_per_second = 8192;
  int64_t fd_reserve = 0;  // 0: max(64, descriptor limit / 8).

  void AddFlags(FlagSet& flags);
  absl::Status Validate() const;

  // The caps in force under `budget`: the flags, clipped so that no port can take the
  // descriptors the others need (each public port at most 2/5 of the connection budget,
  // the cluster port 1/10), whatever a flood does to one of them.
  struct Caps {
    int64_t grpc = 0, http = 0, cluster = 0;
  };
  Caps CapsUnder(const FdBudget& budget) const;
};

// One log line with the budget and the caps, so an operator sees what a small ulimit did.
void LogConnectionCaps(const FdBudget& budget, const ConnectionLimits::Caps& caps);

}  // namespace tessera::net

#endif  // TESSERA_COMMON_NET_CONNECTION_LIMITS_H_
