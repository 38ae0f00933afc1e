#include "common/tls/cluster_security.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <cstdio>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace tessera::tls {
namespace {

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "not PEM";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

// The files parse and the key matches the certificate: a wrong file fails at startup with
// its name rather than at every handshake.
absl::Status CheckFilesLoad(const ClusterSecurity& s) {
  ERR_clear_error();
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_method()), SSL_CTX_free);
  if (ctx == nullptr) return absl::InternalError("SSL_CTX_new failed");
  if (SSL_CTX_load_verify_locations(ctx.get(), s.ca_file.c_str(), nullptr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("--cluster-ca ", s.ca_file, ": ", OpenSslError()));
  }
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), s.cert_file.c_str()) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("--cluster-cert ", s.cert_file, ": ", OpenSslError()));
  }
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), s.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("--cluster-key ", s.key_file, ": ", OpenSslError()));
  }
  if (SSL_CTX_check_private_key(ctx.get()) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--cluster-key ", s.key_file, " does not match --cluster-cert ", s.cert_file));
  }
  return absl::OkStatus();
}

// Why peers will refuse this process's own certificate (expired, not yet valid, not signed
// by the cluster CA), or empty. A warning rather than an error: a rotation may be about to
// replace the files, which are reloaded.
std::string OwnCertificateProblem(const ClusterSecurity& s) {
  std::unique_ptr<FILE, decltype(&std::fclose)> f(std::fopen(s.cert_file.c_str(), "r"), std::fclose);
  if (f == nullptr) return "cannot read it";
  std::unique_ptr<X509, decltype(&X509_free)> leaf(PEM_read_X509(f.get(), nullptr, nullptr, nullptr), X509_free);
  if (leaf == nullptr) return "not PEM";
  STACK_OF(X509)* chain = sk_X509_new_null();
  while (X509* extra = PEM_read_X509(f.get(), nullptr, nullptr, nullptr)) sk_X509_push(chain, extra);
  ERR_clear_error();
  std::unique_ptr<X509_STORE, decltype(&X509_STORE_free)> store(X509_STORE_new(), X509_STORE_free);
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> ctx(X509_STORE_CTX_new(), X509_STORE_CTX_free);
  std::string problem;
  if (X509_STORE_load_file(store.get(), s.ca_file.c_str()) != 1 ||
      X509_STORE_CTX_init(ctx.get(), store.get(), leaf.get(), chain) != 1) {
    problem = "cannot check it against --cluster-ca";
  } else if (X509_verify_cert(ctx.get()) != 1) {
    problem = X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get()));
  }
  sk_X509_pop_free(chain, X509_free);
  ERR_clear_error();
  return problem;
}

}  // namespace

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
  return CheckFilesLoad(s);
}

void LogClusterSecurity(const ClusterSecurity& s, const char* component) {
  if (s.insecure) {
    Log(LogLevel::kWarning, component,
        "--insecure: cluster traffic (registration, coordinator-worker calls, rendezvous store) is plaintext and "
        "unauthenticated by certificate; anyone on the network can read it");
    return;
  }
  if (const std::string problem = OwnCertificateProblem(s); !problem.empty()) {
    Log(LogLevel::kWarning, component, "peers will refuse --cluster-cert until it is replaced",
        {{"cert", s.cert_file}, {"ca", s.ca_file}, {"problem", problem}});
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
