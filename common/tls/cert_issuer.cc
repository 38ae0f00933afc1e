#include "common/tls/cert_issuer.h"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera::tls {
namespace {

std::string Pem(const std::function<int(BIO*)>& write) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
  if (bio == nullptr || write(bio.get()) != 1) return "";
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

bool AddExt(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) return false;
  const bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  if (e == 0) return "unknown OpenSSL error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

}  // namespace

absl::StatusOr<KeyAndCert> IssueCert(const CertRequest& request, const KeyAndCert* issuer) {
  ERR_clear_error();
  KeyAndCert out;
  out.key.reset(EVP_EC_gen("P-256"), EVP_PKEY_free);
  out.cert.reset(X509_new(), X509_free);
  if (out.key == nullptr || out.cert == nullptr) return absl::InternalError(absl::StrCat("key: ", OpenSslError()));
  X509* c = out.cert.get();
  uint64_t serial = request.serial;
  if (serial == 0 && RAND_bytes(reinterpret_cast<unsigned char*>(&serial), sizeof(serial)) != 1) {
    return absl::InternalError("no randomness for a serial number");
  }
  serial &= 0x7fffffffffffffffULL;  // Serials are positive.
  X509* issuer_cert = issuer != nullptr ? issuer->cert.get() : c;
  bool ok = X509_set_version(c, 2) == 1 && ASN1_INTEGER_set_uint64(X509_get_serialNumber(c), serial) == 1 &&
            X509_gmtime_adj(X509_getm_notBefore(c), static_cast<long>(request.not_before_s)) != nullptr &&
            X509_gmtime_adj(X509_getm_notAfter(c), static_cast<long>(request.not_after_s)) != nullptr &&
            X509_NAME_add_entry_by_txt(X509_get_subject_name(c), "CN", MBSTRING_ASC,
                                       reinterpret_cast<const unsigned char*>(request.common_name.c_str()), -1, -1,
                                       0) == 1 &&
            X509_set_issuer_name(c, X509_get_subject_name(issuer_cert)) == 1 && X509_set_pubkey(c, out.key.get()) == 1;
  if (ok && request.is_ca) {
    ok = AddExt(c, issuer_cert, NID_basic_constraints, "critical,CA:TRUE") &&
         AddExt(c, issuer_cert, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else if (ok) {
    std::vector<std::string> sans;
    for (const auto& d : request.dns_names) sans.push_back("DNS:" + d);
    for (const auto& ip : request.ip_addresses) sans.push_back("IP:" + ip);
    ok = AddExt(c, issuer_cert, NID_basic_constraints, "critical,CA:FALSE") &&
         AddExt(c, issuer_cert, NID_key_usage, "critical,digitalSignature") &&
         AddExt(c, issuer_cert, NID_ext_key_usage, "serverAuth,clientAuth") &&
         (sans.empty() || AddExt(c, issuer_cert, NID_subject_alt_name, absl::StrJoin(sans, ",")));
  }
  ok = ok && X509_sign(c, issuer != nullptr ? issuer->key.get() : out.key.get(), EVP_sha256()) > 0;
  if (!ok) return absl::InternalError(absl::StrCat("certificate for ", request.common_name, ": ", OpenSslError()));
  out.key_pem = Pem([&](BIO* b) {
    return PEM_write_bio_PrivateKey(b, out.key.get(), nullptr, nullptr, 0, nullptr, nullptr);
  });
  out.cert_pem = Pem([&](BIO* b) { return PEM_write_bio_X509(b, c); });
  if (out.key_pem.empty() || out.cert_pem.empty()) return absl::InternalError("cannot encode PEM");
  return out;
}

absl::Status WritePrivateFile(const std::string& path, const std::string& text) {
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot create ", path));
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!written) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace tessera::tls
