#ifndef TESSERA_COMMON_TLS_THROWAWAY_PKI_H_
#define TESSERA_COMMON_TLS_THROWAWAY_PKI_H_

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::tls {

// A one-off cluster CA and the certificates of one local cluster, for `tessera serve`:
// made at startup, never written anywhere but `dir`, and thrown away with it. The CA key
// is not kept (not even in `dir`): no certificate can be issued later.
struct ThrowawayPki {
  std::filesystem::path dir;
  std::filesystem::path ca_cert;
  std::filesystem::path coordinator_cert, coordinator_key;
  std::filesystem::path worker_cert, worker_key;
};

// Creates a fresh private directory (mode 0700) under `parent` and writes the CA
// certificate and two ECDSA P-256 leaf certificates into it, each valid for
// `validity_s` seconds and naming localhost, 127.0.0.1, ::1 and `extra_names` (host
// names or IPs the processes are reached at). Keys are written 0600.
absl::StatusOr<ThrowawayPki> MakeThrowawayPki(const std::filesystem::path& parent,
                                              const std::vector<std::string>& extra_names, int64_t validity_s);

}  // namespace tessera::tls

#endif  // TESSERA_COMMON_TLS_THROWAWAY_PKI_H_
