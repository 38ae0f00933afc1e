#ifndef TESSERA_COMMON_TLS_CLUSTER_SECURITY_H_
#define TESSERA_COMMON_TLS_CLUSTER_SECURITY_H_

#include <string>

#include "absl/status/status.h"
#include "common/flag_set.h"
#include "common/rendezvous/kv_store_security.h"

namespace tessera::tls {

// How the cluster's own traffic is protected: workers registering with the coordinator,
// the coordinator's calls to workers, and the rendezvous store. Either mutual TLS under a
// private cluster CA (every member presents a certificate it signed, and checks the
// peer's), or, only when asked for by name, plaintext.
//
// Names. The chain to the cluster CA is what admits a peer: the CA signs only cluster
// members. On top of that a client checks the name in the server's certificate against
// the name it dialled (a worker's advertised host, the coordinator's address), as TLS
// does: a DNS name against the DNS SANs, an IP address against the IP SANs. Where the
// dialled names are not known when the certificate is made (pod IPs in Kubernetes),
// `server_name` replaces them: every server certificate then carries that one name, and
// clients check it instead (gRPC's ssl_target_name_override).
struct ClusterSecurity {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  std::string server_name;  // Empty: the dialled host.
  bool insecure = false;

  bool tls() const { return !ca_file.empty() || !cert_file.empty() || !key_file.empty(); }
};

// --cluster-ca, --cluster-cert, --cluster-key, --cluster-server-name and --insecure, with
// the same meaning on the coordinator and the workers.
void AddClusterSecurityFlags(FlagSet& flags, ClusterSecurity* security);

// Exactly one of: all three files (readable now, so a typo fails at startup), or
// --insecure. Neither is an error that says which flags to pass.
absl::Status ValidateClusterSecurity(const ClusterSecurity& security);

// Logs how cluster traffic runs: a warning under --insecure.
void LogClusterSecurity(const ClusterSecurity& security, const char* component);

// The rendezvous store's side of the same settings, with the cluster's join secret.
KvStoreSecurity StoreSecurity(const ClusterSecurity& security, const std::string& join_secret);

}  // namespace tessera::tls

#endif  // TESSERA_COMMON_TLS_CLUSTER_SECURITY_H_
