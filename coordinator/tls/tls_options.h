#ifndef TESSERA_COORDINATOR_TLS_TLS_OPTIONS_H_
#define TESSERA_COORDINATOR_TLS_TLS_OPTIONS_H_

#include <string>

#include "absl/status/status.h"

namespace tessera::tls {

// PEM files of the public API's TLS identity. Paths rather than contents: both servers
// watch the files so that a rotated certificate (cert-manager rewriting a mounted
// Secret) is picked up by new connections without a restart.
struct TlsFiles {
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;  // Non-empty: clients must present a certificate it signed.

  bool enabled() const { return !cert_file.empty(); }
};

// Flags given together and files readable now, so a typo fails at startup rather than at
// the first handshake.
absl::Status Validate(const TlsFiles& files);

}  // namespace tessera::tls

#endif  // TESSERA_COORDINATOR_TLS_TLS_OPTIONS_H_
