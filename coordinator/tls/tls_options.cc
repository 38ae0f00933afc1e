#include "coordinator/tls/tls_options.h"

#include <fstream>

#include "absl/strings/str_cat.h"

namespace tessera::tls {
namespace {

absl::Status Readable(const std::string& flag, const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", path));
  return absl::OkStatus();
}

}  // namespace

absl::Status Validate(const TlsFiles& files) {
  if (files.cert_file.empty() != files.key_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  if (!files.enabled()) {
    if (!files.client_ca_file.empty()) return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
    return absl::OkStatus();
  }
  if (auto s = Readable("--tls-cert", files.cert_file); !s.ok()) return s;
  if (auto s = Readable("--tls-key", files.key_file); !s.ok()) return s;
  if (!files.client_ca_file.empty()) return Readable("--tls-client-ca", files.client_ca_file);
  return absl::OkStatus();
}

}  // namespace tessera::tls
