#include "common/rendezvous/kv_store_handshake.h"

#include <openssl/err.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/auth/constant_time.h"
#include "common/rendezvous/kv_store_protocol.h"

namespace tessera::comm_internal {
namespace {

using SslCtxPtr = std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)>;

std::string OpenSslError() {
  std::string out;
  for (unsigned long e = ERR_get_error(); e != 0; e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    absl::StrAppend(&out, out.empty() ? "" : "; ", buf);
  }
  return out;
}

// A context for one connection: TLS 1.2 or later, this side's certificate, and the peer's
// required and verified against the cluster CA (on both sides: mutual TLS).
absl::StatusOr<SslCtxPtr> MakeContext(const KvStoreSecurity& s, bool server) {
  ERR_clear_error();
  SslCtxPtr ctx(SSL_CTX_new(server ? TLS_server_method() : TLS_client_method()), SSL_CTX_free);
  if (ctx == nullptr) return absl::InternalError(absl::StrCat("SSL_CTX_new: ", OpenSslError()));
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), s.cert_file.c_str()) != 1) {
    return absl::FailedPreconditionError(absl::StrCat("cluster certificate ", s.cert_file, ": ", OpenSslError()));
  }
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), s.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx.get()) != 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("cluster key ", s.key_file, " (for ", s.cert_file, "): ", OpenSslError()));
  }
  if (SSL_CTX_load_verify_locations(ctx.get(), s.ca_file.c_str(), nullptr) != 1) {
    return absl::FailedPreconditionError(absl::StrCat("cluster CA ", s.ca_file, ": ", OpenSslError()));
  }
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER | (server ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0), nullptr);
  return ctx;
}

std::string Mac(const std::string& secret, absl::string_view role, absl::string_view server_nonce,
                absl::string_view client_nonce) {
  const std::string message = absl::StrCat(role, server_nonce, client_nonce);
  std::string mac(kKvMacBytes, '\0');
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(),
       reinterpret_cast<unsigned char*>(mac.data()), &len);
  return mac;
}

absl::StatusOr<std::string> Nonce() {
  std::string nonce(kKvNonceBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), static_cast<int>(nonce.size())) != 1) {
    return absl::InternalError("no randomness for the store handshake");
  }
  return nonce;
}

}  // namespace

absl::Status AcceptHandshake(Conn& conn, const KvStoreSecurity& security, absl::Time deadline) {
  if (security.tls()) {
    absl::StatusOr<SslCtxPtr> ctx = MakeContext(security, /*server=*/true);
    if (!ctx.ok()) return ctx.status();
    if (absl::Status s = conn.StartTls(ctx->get(), /*server=*/true, "", deadline); !s.ok()) {
      return absl::UnauthenticatedError(absl::StrCat("no mutual TLS (a client certificate from the cluster CA is "
                                                      "required): ", s.message()));
    }
  }
  absl::StatusOr<std::string> server_nonce = Nonce();
  if (!server_nonce.ok()) return server_nonce.status();
  std::string hello(kKvMagic, sizeof(kKvMagic));
  hello += *server_nonce;
  if (absl::Status s = conn.WriteAll(hello.data(), hello.size(), deadline); !s.ok()) return s;
  std::string client_nonce(kKvNonceBytes, '\0'), client_mac(kKvMacBytes, '\0');
  if (absl::Status s = conn.ReadAll(client_nonce.data(), client_nonce.size(), deadline); !s.ok()) {
    return absl::UnauthenticatedError(absl::StrCat("no answer to the join-secret challenge: ", s.message()));
  }
  if (absl::Status s = conn.ReadAll(client_mac.data(), client_mac.size(), deadline); !s.ok()) {
    return absl::UnauthenticatedError(absl::StrCat("no answer to the join-secret challenge: ", s.message()));
  }
  if (!auth::ConstantTimeEquals(Mac(security.join_secret, "client", *server_nonce, client_nonce), client_mac)) {
    const uint8_t denied = kKvDenied;
    (void)conn.WriteAll(&denied, 1, deadline);  // Best effort: the client learns why.
    return absl::PermissionDeniedError("wrong join secret (the client's --join-secret-file differs)");
  }
  std::string reply(1, static_cast<char>(kKvOk));
  reply += Mac(security.join_secret, "server", *server_nonce, client_nonce);
  return conn.WriteAll(reply.data(), reply.size(), deadline);
}

absl::Status ConnectHandshake(Conn& conn, const KvStoreSecurity& security, absl::string_view host,
                              absl::Time deadline) {
  if (security.tls()) {
    absl::StatusOr<SslCtxPtr> ctx = MakeContext(security, /*server=*/false);
    if (!ctx.ok()) return ctx.status();
    const absl::string_view name = security.server_name.empty() ? host : security.server_name;
    if (absl::Status s = conn.StartTls(ctx->get(), /*server=*/false, name, deadline); !s.ok()) {
      return absl::UnauthenticatedError(absl::StrCat("TLS with the store failed (its certificate must chain to the "
                                                      "cluster CA and name ", name, "): ", s.message()));
    }
  }
  char hello[sizeof(kKvMagic) + kKvNonceBytes];
  if (absl::Status s = conn.ReadAll(hello, sizeof(hello), deadline); !s.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "no store greeting (", s.message(),
        security.tls() ? "; the store may refuse this certificate)" : "; is the store using TLS?)"));
  }
  if (absl::string_view(hello, sizeof(kKvMagic)) != absl::string_view(kKvMagic, sizeof(kKvMagic))) {
    return absl::FailedPreconditionError("the peer is not a Tessera rendezvous store of this version");
  }
  const std::string server_nonce(hello + sizeof(kKvMagic), kKvNonceBytes);
  absl::StatusOr<std::string> client_nonce = Nonce();
  if (!client_nonce.ok()) return client_nonce.status();
  const std::string answer = *client_nonce + Mac(security.join_secret, "client", server_nonce, *client_nonce);
  if (absl::Status s = conn.WriteAll(answer.data(), answer.size(), deadline); !s.ok()) return s;
  uint8_t code = 0;
  if (absl::Status s = ReadU8(conn, &code, deadline); !s.ok()) {
    return absl::UnavailableError(absl::StrCat("no answer to the join secret: ", s.message()));
  }
  if (code == kKvDenied) {
    return absl::PermissionDeniedError("the store refused this join secret (--join-secret-file differs from the "
                                       "coordinator's)");
  }
  std::string server_mac(kKvMacBytes, '\0');
  if (code != kKvOk || !conn.ReadAll(server_mac.data(), server_mac.size(), deadline).ok()) {
    return absl::UnavailableError("malformed answer to the join secret");
  }
  if (!auth::ConstantTimeEquals(Mac(security.join_secret, "server", server_nonce, *client_nonce), server_mac)) {
    return absl::PermissionDeniedError("the store does not know this cluster's join secret; not trusting it");
  }
  return absl::OkStatus();
}

}  // namespace tessera::comm_internal
