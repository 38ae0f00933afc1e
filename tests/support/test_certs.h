#ifndef TESSERA_TESTS_SUPPORT_TEST_CERTS_H_
#define TESSERA_TESTS_SUPPORT_TEST_CERTS_H_

// Throwaway certificates for the TLS tests, made with OpenSSL's C API so that the tests
// need no `openssl` binary and can make what the CLI makes awkward (an expired cert).

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>

namespace tessera::testing {

struct KeyAndCert {
  std::shared_ptr<EVP_PKEY> key;
  std::shared_ptr<X509> cert;
  std::string key_pem;
  std::string cert_pem;
};

namespace certs_internal {

inline std::string Pem(const std::function<int(BIO*)>& write) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
  write(bio.get());
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

inline void AddExt(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

}  // namespace certs_internal

// A P-256 key and a certificate for `cn`, signed by `issuer` (self-signed when null),
// valid from now + not_before_s to now + not_after_s.
inline KeyAndCert MakeCert(const std::string& cn, const KeyAndCert* issuer, long serial, bool is_ca,
                           long not_before_s = -3600, long not_after_s = 86400) {
  KeyAndCert out;
  out.key.reset(EVP_EC_gen("P-256"), EVP_PKEY_free);
  out.cert.reset(X509_new(), X509_free);
  X509* c = out.cert.get();
  X509_set_version(c, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(c), serial);
  X509_gmtime_adj(X509_getm_notBefore(c), not_before_s);
  X509_gmtime_adj(X509_getm_notAfter(c), not_after_s);
  X509_NAME* name = X509_get_subject_name(c);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509* issuer_cert = issuer != nullptr ? issuer->cert.get() : c;
  X509_set_issuer_name(c, X509_get_subject_name(issuer_cert));
  X509_set_pubkey(c, out.key.get());
  if (is_ca) {
    certs_internal::AddExt(c, issuer_cert, NID_basic_constraints, "critical,CA:TRUE");
    certs_internal::AddExt(c, issuer_cert, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    certs_internal::AddExt(c, issuer_cert, NID_basic_constraints, "CA:FALSE");
    certs_internal::AddExt(c, issuer_cert, NID_subject_alt_name, "DNS:localhost,IP:127.0.0.1");
    certs_internal::AddExt(c, issuer_cert, NID_ext_key_usage, "serverAuth,clientAuth");
  }
  X509_sign(c, issuer != nullptr ? issuer->key.get() : out.key.get(), EVP_sha256());
  out.key_pem = certs_internal::Pem([&](BIO* b) {
    return PEM_write_bio_PrivateKey(b, out.key.get(), nullptr, nullptr, 0, nullptr, nullptr);
  });
  out.cert_pem = certs_internal::Pem([&](BIO* b) { return PEM_write_bio_X509(b, c); });
  return out;
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
