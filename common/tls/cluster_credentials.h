#ifndef TESSERA_COMMON_TLS_CLUSTER_CREDENTIALS_H_
#define TESSERA_COMMON_TLS_CLUSTER_CREDENTIALS_H_

#include <memory>
#include <string>

#include "common/tls/cluster_security.h"
#include "grpcpp/grpcpp.h"

namespace tessera::tls {

// How often the certificate files are re-read (gRPC's file watcher): a rotated
// certificate is used by new connections within seconds, without a restart.
inline constexpr unsigned kClusterReloadIntervalSeconds = 2;

// A cluster port (the coordinator's, each worker's): plaintext under --insecure, else TLS
// that requires a client certificate signed by the cluster CA.
std::shared_ptr<grpc::ServerCredentials> ClusterServerCredentials(const ClusterSecurity& security);

// A channel to a cluster port: plaintext under --insecure, else TLS that presents this
// process's certificate and verifies the server's chain (cluster CA) and name (the dialled
// host, or security.server_name; see ClusterChannelArguments).
std::shared_ptr<grpc::ChannelCredentials> ClusterChannelCredentials(const ClusterSecurity& security);

// Adds the name override to channel arguments when security.server_name is set.
void AddClusterChannelArguments(const ClusterSecurity& security, grpc::ChannelArguments* args);

}  // namespace tessera::tls

#endif  // TESSERA_COMMON_TLS_CLUSTER_CREDENTIALS_H_
