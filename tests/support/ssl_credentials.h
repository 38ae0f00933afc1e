#ifndef TESSERA_TESTS_SUPPORT_SSL_CREDENTIALS_H_
#define TESSERA_TESTS_SUPPORT_SSL_CREDENTIALS_H_

#include <memory>

#include "grpcpp/security/credentials.h"
#include "tests/support/test_certs.h"

namespace tessera::testing {

// gRPC channel credentials that trust `ca` and, with `client`, present it (mutual TLS).
inline std::shared_ptr<grpc::ChannelCredentials> TrustingCredentials(
    const KeyAndCert& ca, const KeyAndCert* client = nullptr) {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = ca.cert_pem;
  if (client != nullptr) {
    o.pem_cert_chain = client->cert_pem;
    o.pem_private_key = client->key_pem;
  }
  return grpc::SslCredentials(o);
}

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_SUPPORT_SSL_CREDENTIALS_H_
