#ifndef TESSERA_TESTS_SUPPORT_TEST_CERTS_H_
#define TESSERA_TESTS_SUPPORT_TEST_CERTS_H_

// Throwaway certificates for the TLS tests, made with OpenSSL's C API (common/tls's
// issuer, which `tessera serve` uses too) so that the tests need no `openssl` binary and
// can make what the CLI makes awkward (an expired cert). Link tessera_cluster_tls.

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/tls/cert_issuer.h"

namespace tessera::testing {

using KeyAndCert = tls::KeyAndCert;

// A P-256 key and a certificate for `cn` (leaf SANs: localhost and 127.0.0.1), signed by
// `issuer` (self-signed when null), valid from now + not_before_s to now + not_after_s.
inline KeyAndCert MakeCert(const std::string& cn, const KeyAndCert* issuer, long serial, bool is_ca,
                           long not_before_s = -3600, long not_after_s = 86400) {
  tls::CertRequest request;
  request.common_name = cn;
  request.is_ca = is_ca;
  request.serial = static_cast<uint64_t>(serial);
  request.not_before_s = not_before_s;
  request.not_after_s = not_after_s;
  if (!is_ca) {
    request.dns_names = {"localhost"};
    request.ip_addresses = {"127.0.0.1"};
  }
  auto issued = tls::IssueCert(request, issuer);
  if (!issued.ok()) std::abort();  // Only a broken OpenSSL gets here; nothing to test then.
  return *std::move(issued);
}

inline void WriteFile(const std::filesystem::path& path, const std::string& text) {
  // Written beside and renamed, as a Kubernetes Secret volume swaps its files: a reader
  // never sees half a PEM.
  const std::filesystem::path tmp = path.string() + ".tmp";
  std::ofstream(tmp, std::ios::binary | std::ios::trunc) << text;
  std::filesystem::rename(tmp, path);
}

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_SUPPORT_TEST_CERTS_H_
