#include "common/tls/cluster_security.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace tessera::tls {

void AddClusterSecurityFlags(FlagSet& flags, ClusterSecurity* security) {
  flags.String("cluster-ca", &security->ca_file,
               "PEM CA bundle of the cluster: every coordinator, worker and rendezvous-store peer must present a "
               "certificate it signed (mutual TLS on all cluster traffic). With --cluster-cert and --cluster-key.");
  flags.String("cluster-cert", &security->cert_file,
               "PEM certificate chain of this process in the cluster (server and client; reloaded when the file "
               "changes).");
  flags.String("cluster-key", &security->key_file, "PEM private key of --cluster-cert.");
  flags.String("cluster-server-name", &security->server_name,
               "Name every cluster server certificate carries, checked instead of the dialled host (for addresses "
               "unknown when certificates are made, e.g. pod IPs). Empty: the dialled host name or IP.");
  flags.Bool("insecure", &security->insecure,
             "Run cluster traffic (registration, coordinator-to-worker calls, the rendezvous store) in plaintext. "
             "Only on a network where every host is trusted; the cluster-TLS flags are the default way.");
}

absl::Status ValidateClusterSecurity(const ClusterSecurity& s) {
  if (s.insecure && s.tls()) {
    return absl::InvalidArgumentError("--insecure contradicts --cluster-ca/--cluster-cert/--cluster-key: pass one or "
                                      "the other");
  }
  if (s.insecure) return absl::OkStatus();
  if (!s.tls()) {
    return absl::InvalidArgumentError(
        "cluster traffic needs mutual TLS: pass --cluster-ca, --cluster-cert and --cluster-key (a CA and this "
        "process's certificate and key; `tessera serve` makes them itself), or --insecure to run it in plaintext on "
        "a network you trust");
  }
  for (const auto& [flag, path] : {std::pair<const char*, const std::string*>{"--cluster-ca", &s.ca_file},
                                   {"--cluster-cert", &s.cert_file},
                                   {"--cluster-key", &s.key_file}}) {
    if (path->empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--cluster-ca, --cluster-cert and --cluster-key go together; ", flag, " is missing"));
    }
    if (!std::ifstream(*path)) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", *path));
  }
  return absl::OkStatus();
}

void LogClusterSecurity(const ClusterSecurity& s, const char* component) {
  if (s.insecure) {
    Log(LogLevel::kWarning, component,
        "--insecure: cluster traffic (registration, coordinator-worker calls, rendezvous store) is plaintext and "
        "unauthenticated by certificate; anyone on the network can read it");
    return;
  }
  Log(LogLevel::kInfo, component, "cluster traffic uses mutual TLS",
      {{"ca", s.ca_file}, {"cert", s.cert_file}, {"server_name", s.server_name.empty() ? "(dialled host)" : s.server_name}});
}

KvStoreSecurity StoreSecurity(const ClusterSecurity& s, const std::string& join_secret) {
  KvStoreSecurity out;
  out.join_secret = join_secret;
  if (!s.insecure) {
    out.ca_file = s.ca_file;
    out.cert_file = s.cert_file;
    out.key_file = s.key_file;
    out.server_name = s.server_name;
  }
  return out;
}

}  // namespace tessera::tls
