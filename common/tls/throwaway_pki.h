#ifndef TESSERA_COMMON_TLS_THROWAWAY_PKI_H_
#define TESSERA_COMMON_TLS_THROWAWAY_PKI_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::tls {

// A one-off cluster CA and the certificates of one local cluster, for `tessera serve`, as
// PEM text in memory: the caller decides where they live (serve keeps them in memfds, so
// nothing secret ever touches a disk). The CA key is not kept: no certificate can be
// issued later.
struct ThrowawayPki {
  std::string ca_cert;
  std::string coordinator_cert, coordinator_key;
  std::string worker_cert, worker_key;
};

// Makes the CA certificate and two ECDSA P-256 leaf certificates, each valid for
// `validity_s` seconds and naming localhost, 127.0.0.1, ::1 and `extra_names` (host names
// or IPs the processes are reached at).
absl::StatusOr<ThrowawayPki> MakeThrowawayPki(const std::vector<std::string>& extra_names, int64_t validity_s);

}  // namespace tessera::tls

#endif  // TESSERA_COMMON_TLS_THROWAWAY_PKI_H_
