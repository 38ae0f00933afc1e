#include "common/tls/throwaway_pki.h"

#include <arpa/inet.h>

#include <algorithm>
#include <tuple>

#include "common/tls/cert_issuer.h"

namespace tessera::tls {
namespace {

bool IsIp(const std::string& name) {
  unsigned char buf[16];
  return ::inet_pton(AF_INET, name.c_str(), buf) == 1 || ::inet_pton(AF_INET6, name.c_str(), buf) == 1;
}

}  // namespace

absl::StatusOr<ThrowawayPki> MakeThrowawayPki(const std::vector<std::string>& extra_names, int64_t validity_s) {
  CertRequest ca_request;
  ca_request.common_name = "tessera serve cluster CA";
  ca_request.is_ca = true;
  ca_request.not_before_s = -300;
  ca_request.not_after_s = validity_s;
  absl::StatusOr<KeyAndCert> ca = IssueCert(ca_request, nullptr);
  if (!ca.ok()) return ca.status();
  ThrowawayPki pki;
  pki.ca_cert = ca->cert_pem;

  CertRequest leaf;
  leaf.dns_names = {"localhost"};
  leaf.ip_addresses = {"127.0.0.1", "::1"};
  for (const std::string& name : extra_names) {
    auto& list = IsIp(name) ? leaf.ip_addresses : leaf.dns_names;
    if (!name.empty() && std::find(list.begin(), list.end(), name) == list.end()) list.push_back(name);
  }
  leaf.not_before_s = -300;
  leaf.not_after_s = validity_s;
  for (const auto& [cn, cert, key] : {std::tuple{"tessera-coordinator", &pki.coordinator_cert, &pki.coordinator_key},
                                      std::tuple{"tessera-worker", &pki.worker_cert, &pki.worker_key}}) {
    leaf.common_name = cn;
    absl::StatusOr<KeyAndCert> issued = IssueCert(leaf, &*ca);
    if (!issued.ok()) return issued.status();
    *cert = std::move(issued->cert_pem);
    *key = std::move(issued->key_pem);
  }
  return pki;
}

}  // namespace tessera::tls
