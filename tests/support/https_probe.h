#ifndef TESSERA_TESTS_SUPPORT_HTTPS_PROBE_H_
#define TESSERA_TESTS_SUPPORT_HTTPS_PROBE_H_

// One HTTP(S) GET over a fresh connection with OpenSSL, reporting what the handshake saw
// (the server certificate's serial), so the tests need neither curl nor a TLS library
// of their own.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/support/test_certs.h"

namespace tessera::testing {

struct HttpsProbe {
  bool handshake_ok = false;
  std::string error;
  std::string server_serial;
  std::string status_line;  // "HTTP/1.1 200 OK", when an answer came.
};

namespace https_internal {

inline int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline std::string FirstLine(const std::string& response) { return response.substr(0, response.find("\r\n")); }

inline std::string Request(const std::string& path) {
  return absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
}

}  // namespace https_internal

// `ca` null: no verification; `client` non-null: presented as the client certificate.
inline HttpsProbe GetOverTls(int port, const std::string& path, const KeyAndCert* ca,
                             const KeyAndCert* client = nullptr) {
  HttpsProbe out;
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()), SSL_CTX_free);
  if (ca != nullptr) {
    X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx.get()), ca->cert.get());
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  }
  if (client != nullptr) {
    SSL_CTX_use_certificate(ctx.get(), client->cert.get());
    SSL_CTX_use_PrivateKey(ctx.get(), client->key.get());
  }
  const int fd = https_internal::Connect(port);
  if (fd < 0) {
    out.error = "connect failed";
    return out;
  }
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx.get()), SSL_free);
  SSL_set_fd(ssl.get(), fd);
  SSL_set1_host(ssl.get(), "127.0.0.1");
  if (SSL_connect(ssl.get()) != 1) {
    out.error = ERR_error_string(ERR_get_error(), nullptr);
    ::close(fd);
    return out;
  }
  out.handshake_ok = true;
  if (X509* peer = SSL_get1_peer_certificate(ssl.get()); peer != nullptr) {
    out.server_serial = absl::StrCat(ASN1_INTEGER_get(X509_get0_serialNumber(peer)));
    X509_free(peer);
  }
  const std::string request = https_internal::Request(path);
  SSL_write(ssl.get(), request.data(), static_cast<int>(request.size()));
  std::string response;
  char buf[4096];
  int n;
  // With TLS 1.3 a server that wants a client certificate and gets none says so only
  // after the handshake: the read fails, with no status line.
  while ((n = SSL_read(ssl.get(), buf, sizeof(buf))) > 0) response.append(buf, static_cast<size_t>(n));
  out.status_line = https_internal::FirstLine(response);
  if (out.status_line.empty()) out.error = ERR_error_string(ERR_get_error(), nullptr);
  ::close(fd);
  return out;
}

// Plain HTTP to the same port: a TLS server must not answer it.
inline std::string GetPlaintextStatusLine(int port, const std::string& path) {
  const int fd = https_internal::Connect(port);
  if (fd < 0) return "";
  const std::string request = https_internal::Request(path);
  (void)!::write(fd, request.data(), request.size());
  std::string response;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) response.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return https_internal::FirstLine(response);
}

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_SUPPORT_HTTPS_PROBE_H_
