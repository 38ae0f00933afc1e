#ifndef TESSERA_COMMON_GRPC_CLIENT_TLS_H_
#define TESSERA_COMMON_GRPC_CLIENT_TLS_H_

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"

namespace tessera {

// Client side of the public API's TLS (--tls-ca and, for mutual TLS, --tls-cert and
// --tls-key of the clients). Empty ca_file: plaintext.
struct ClientTlsFiles {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
};

inline absl::StatusOr<std::string> ReadPem(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

inline absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientCredentials(const ClientTlsFiles& files) {
  if (files.ca_file.empty()) {
    if (!files.cert_file.empty()) return absl::InvalidArgumentError("a client certificate needs --tls-ca");
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions options;
  auto ca = ReadPem(files.ca_file);
  if (!ca.ok()) return ca.status();
  options.pem_root_certs = *ca;
  if (!files.cert_file.empty()) {
    auto cert = ReadPem(files.cert_file);
    if (!cert.ok()) return cert.status();
    auto key = ReadPem(files.key_file);
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *cert;
    options.pem_private_key = *key;
  }
  return grpc::SslCredentials(options);
}

}  // namespace tessera

#endif  // TESSERA_COMMON_GRPC_CLIENT_TLS_H_
