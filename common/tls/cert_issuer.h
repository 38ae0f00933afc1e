#ifndef TESSERA_COMMON_TLS_CERT_ISSUER_H_
#define TESSERA_COMMON_TLS_CERT_ISSUER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

typedef struct evp_pkey_st EVP_PKEY;
typedef struct x509_st X509;

namespace tessera::tls {

// A private key and its certificate, as objects (to sign with) and as PEM (to write).
struct KeyAndCert {
  std::shared_ptr<EVP_PKEY> key;
  std::shared_ptr<X509> cert;
  std::string key_pem;
  std::string cert_pem;
};

struct CertRequest {
  std::string common_name;
  bool is_ca = false;
  // Subject alternative names of a leaf certificate: what TLS peers verify the name
  // against. A leaf may be used as server and as client (both extended key usages), as
  // every cluster member is both.
  std::vector<std::string> dns_names;
  std::vector<std::string> ip_addresses;
  // Validity relative to now, in seconds (the start back-dated against clock skew).
  int64_t not_before_s = -3600;
  int64_t not_after_s = 86400;
  uint64_t serial = 0;  // 0: 64 random bits.
};

// An ECDSA P-256 key and a certificate for it, signed by `issuer` (self-signed when null).
absl::StatusOr<KeyAndCert> IssueCert(const CertRequest& request, const KeyAndCert* issuer);

// Writes `text` to `path` created with mode 0600 (a private key must never be readable
// by others, even for a moment), replacing any file there.
absl::Status WritePrivateFile(const std::string& path, const std::string& text);

}  // namespace tessera::tls

#endif  // TESSERA_COMMON_TLS_CERT_ISSUER_H_
