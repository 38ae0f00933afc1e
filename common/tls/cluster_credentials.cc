#include "common/tls/cluster_credentials.h"

#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_certificate_verifier.h"
#include "grpcpp/security/tls_credentials_options.h"

namespace tessera::tls {
namespace {

std::shared_ptr<grpc::experimental::CertificateProviderInterface> Provider(const ClusterSecurity& s) {
  // The file watcher rather than the PEM copied once (SslCredentials), so a renewed
  // certificate (cert-manager rewriting the mounted Secret) needs no restart.
  return std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(s.key_file, s.cert_file, s.ca_file,
                                                                              kClusterReloadIntervalSeconds);
}

}  // namespace

std::shared_ptr<grpc::ServerCredentials> ClusterServerCredentials(const ClusterSecurity& s) {
  if (s.insecure) return grpc::InsecureServerCredentials();
  grpc::experimental::TlsServerCredentialsOptions options(Provider(s));
  options.watch_identity_key_cert_pairs();
  options.watch_root_certs();
  options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  return grpc::experimental::TlsServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> ClusterChannelCredentials(const ClusterSecurity& s) {
  if (s.insecure) return grpc::InsecureChannelCredentials();
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(Provider(s));
  options.watch_identity_key_cert_pairs();
  options.watch_root_certs();
  options.set_verify_server_certs(true);
  // Explicit, not gRPC's default: the name check is part of the design (cluster_security.h).
  options.set_certificate_verifier(std::make_shared<grpc::experimental::HostNameCertificateVerifier>());
  return grpc::experimental::TlsCredentials(options);
}

void AddClusterChannelArguments(const ClusterSecurity& s, grpc::ChannelArguments* args) {
  if (!s.insecure && !s.server_name.empty()) args->SetSslTargetNameOverride(s.server_name);
}

}  // namespace tessera::tls
