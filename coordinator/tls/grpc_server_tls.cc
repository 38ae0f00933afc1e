#include "coordinator/tls/grpc_server_tls.h"

#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"

namespace tessera::tls {

std::shared_ptr<grpc::ServerCredentials> PublicServerCredentials(const TlsFiles& files) {
  if (!files.enabled()) return grpc::InsecureServerCredentials();
  // FileWatcherCertificateProvider rather than SslServerCredentials: the latter copies the
  // PEM once, so a renewed certificate would need a restart.
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      files.key_file, files.cert_file, files.client_ca_file, kReloadIntervalSeconds);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (!files.client_ca_file.empty()) {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

}  // namespace tessera::tls
