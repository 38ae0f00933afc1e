#ifndef TESSERA_COORDINATOR_TLS_GRPC_SERVER_TLS_H_
#define TESSERA_COORDINATOR_TLS_GRPC_SERVER_TLS_H_

#include <memory>

#include "coordinator/tls/tls_options.h"
#include "grpcpp/security/server_credentials.h"

namespace tessera::tls {

// How often the files are re-read. Rotation tools renew well before expiry, so seconds
// of delay are harmless, and re-reading is cheap.
inline constexpr unsigned kReloadIntervalSeconds = 2;

// Credentials of the public gRPC port: insecure when `files` is not enabled, else TLS
// whose identity (and client CA) gRPC's file watcher reloads when the files change.
std::shared_ptr<grpc::ServerCredentials> PublicServerCredentials(const TlsFiles& files);

}  // namespace tessera::tls

#endif  // TESSERA_COORDINATOR_TLS_GRPC_SERVER_TLS_H_
