#include "common/rendezvous/conn.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tessera::comm_internal {
namespace {

std::string PeerOf(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "unknown peer";
  char host[INET6_ADDRSTRLEN] = {0};
  int port = 0;
  if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
    return absl::StrCat("[", host, "]:", port);
  }
  const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
  ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
  port = ntohs(a->sin_port);
  return absl::StrCat(host, ":", port);
}

// OpenSSL's queued errors of this thread as one line (and the queue cleared), plus the
// certificate verification result, which says why a peer was refused.
std::string SslErrors(SSL* ssl) {
  std::string out;
  for (unsigned long e = ERR_get_error(); e != 0; e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    absl::StrAppend(&out, out.empty() ? "" : "; ", buf);
  }
  if (ssl != nullptr) {
    const long verify = SSL_get_verify_result(ssl);
    if (verify != X509_V_OK) {
      absl::StrAppend(&out, out.empty() ? "" : "; ", "certificate verification: ",
                      X509_verify_cert_error_string(verify));
    }
  }
  return out.empty() ? "no detail from OpenSSL" : out;
}

// After an SSL call returned `rc`: waits for the socket when OpenSSL asks to be called
// again, or returns the error. `eof` is set on a clean close by the peer.
absl::Status SslRetry(int fd, SSL* ssl, int rc, absl::Time deadline, const char* what, bool* eof = nullptr) {
  const int err = SSL_get_error(ssl, rc);
  switch (err) {
    case SSL_ERROR_WANT_READ:
      return WaitReady(fd, POLLIN, deadline, what);
    case SSL_ERROR_WANT_WRITE:
      return WaitReady(fd, POLLOUT, deadline, what);
    case SSL_ERROR_ZERO_RETURN:
      if (eof != nullptr) *eof = true;
      return absl::UnavailableError(absl::StrCat("tls ", what, ": connection closed by peer"));
    case SSL_ERROR_SYSCALL:
      if (ERR_peek_error() == 0) {
        if (eof != nullptr && errno == 0) *eof = true;
        return absl::UnavailableError(absl::StrCat("tls ", what, ": ",
                                                   errno == 0 ? "connection closed by peer" : std::strerror(errno)));
      }
      [[fallthrough]];
    default:
      return absl::UnavailableError(absl::StrCat("tls ", what, ": ", SslErrors(ssl)));
  }
}

bool IsIpAddress(const std::string& name) {
  unsigned char buf[sizeof(in6_addr)];
  return ::inet_pton(AF_INET, name.c_str(), buf) == 1 || ::inet_pton(AF_INET6, name.c_str(), buf) == 1;
}

}  // namespace

Conn::Conn(UniqueFd fd) : fd_(std::move(fd)) {
  if (fd_.valid()) {
    peer_ = PeerOf(fd_.get());
    // Non-blocking, so that a TLS record read waits in poll() under our deadline instead
    // of in read() forever; plaintext I/O polls first anyway.
    const int flags = ::fcntl(fd_.get(), F_GETFL, 0);
    if (flags >= 0) ::fcntl(fd_.get(), F_SETFL, flags | O_NONBLOCK);
  }
}

Conn::~Conn() {
  if (ssl_ == nullptr) return;
  // Best effort, never waiting: a close_notify lets the peer tell a clean close from a
  // truncation.
  if (SSL_is_init_finished(ssl_)) {
    ERR_clear_error();
    SSL_shutdown(ssl_);
    ERR_clear_error();
  }
  SSL_free(ssl_);
}

void Conn::Shutdown() { ::shutdown(fd_.get(), SHUT_RDWR); }

absl::Status Conn::StartTls(SSL_CTX* ctx, bool server, absl::string_view verify_name, absl::Time deadline) {
  // OpenSSL writes with write(), which raises SIGPIPE on a closed peer; gRPC binaries
  // ignore it already, this covers the rest (tests, tools).
  struct sigaction old {};
  if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) std::signal(SIGPIPE, SIG_IGN);
  ERR_clear_error();
  ssl_ = SSL_new(ctx);
  if (ssl_ == nullptr || SSL_set_fd(ssl_, fd_.get()) != 1) {
    return absl::InternalError(absl::StrCat("tls setup: ", SslErrors(nullptr)));
  }
  if (!server) {
    const std::string name(verify_name);
    if (name.empty()) return absl::InvalidArgumentError("tls: no name to verify the store's certificate against");
    const int ok = IsIpAddress(name) ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), name.c_str())
                                     : SSL_set1_host(ssl_, name.c_str());
    if (ok != 1) return absl::InvalidArgumentError(absl::StrCat("tls: cannot verify against the name ", name));
    if (!IsIpAddress(name)) SSL_set_tlsext_host_name(ssl_, name.c_str());
  }
  while (true) {
    ERR_clear_error();
    const int rc = server ? SSL_accept(ssl_) : SSL_connect(ssl_);
    if (rc == 1) return absl::OkStatus();
    if (absl::Status s = SslRetry(fd_.get(), ssl_, rc, deadline, "handshake"); !s.ok()) return s;
  }
}

absl::Status Conn::WriteAll(const void* data, size_t len, absl::Time deadline) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    if (ssl_ != nullptr) {
      ERR_clear_error();
      size_t n = 0;
      const int rc = SSL_write_ex(ssl_, p, len, &n);
      if (rc != 1) {
        if (absl::Status s = SslRetry(fd_.get(), ssl_, rc, deadline, "write"); !s.ok()) return s;
        continue;
      }
      p += n;
      len -= n;
      continue;
    }
    if (absl::Status s = WaitReady(fd_.get(), POLLOUT, deadline, "write"); !s.ok()) return s;
    const ssize_t n = ::send(fd_.get(), p, len, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return absl::UnavailableError(absl::StrCat("socket write: ", std::strerror(errno)));
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status Conn::ReadAll(void* data, size_t len, absl::Time deadline) {
  char* p = static_cast<char*>(data);
  size_t done = 0;
  while (done < len) {
    size_t n = 0;
    bool eof = false;
    if (ssl_ != nullptr) {
      ERR_clear_error();
      errno = 0;
      const int rc = SSL_read_ex(ssl_, p + done, len - done, &n);
      if (rc != 1) {
        absl::Status s = SslRetry(fd_.get(), ssl_, rc, deadline, "read", &eof);
        if (!eof) {
          if (!s.ok()) return s;
          continue;
        }
      }
    } else {
      if (absl::Status s = WaitReady(fd_.get(), POLLIN, deadline, "read"); !s.ok()) return s;
      const ssize_t r = ::recv(fd_.get(), p + done, len - done, 0);
      if (r < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return absl::UnavailableError(absl::StrCat("socket read: ", std::strerror(errno)));
      }
      eof = r == 0;
      n = static_cast<size_t>(r);
    }
    if (eof) {
      if (done == 0) return absl::OutOfRangeError("connection closed by peer");
      return absl::UnavailableError(
          absl::StrCat("connection closed mid-message after ", done, " of ", len, " bytes"));
    }
    done += n;
  }
  return absl::OkStatus();
}

absl::Status ReadU8(Conn& c, uint8_t* v, absl::Time deadline) { return c.ReadAll(v, 1, deadline); }

absl::Status ReadU32(Conn& c, uint32_t* v, absl::Time deadline) {
  unsigned char buf[4];
  if (absl::Status s = c.ReadAll(buf, sizeof(buf), deadline); !s.ok()) return s;
  *v = DecodeU32(buf);
  return absl::OkStatus();
}

absl::Status ReadU64(Conn& c, uint64_t* v, absl::Time deadline) {
  unsigned char buf[8];
  if (absl::Status s = c.ReadAll(buf, sizeof(buf), deadline); !s.ok()) return s;
  *v = DecodeU64(buf);
  return absl::OkStatus();
}

absl::Status ReadBytes32(Conn& c, std::string* s, uint32_t max_len, absl::Time deadline) {
  uint32_t len = 0;
  if (absl::Status st = ReadU32(c, &len, deadline); !st.ok()) return st;
  if (len > max_len) {
    return absl::InvalidArgumentError(absl::StrCat("string of ", len, " bytes exceeds the limit of ", max_len));
  }
  s->resize(len);
  return c.ReadAll(s->data(), len, deadline);
}

absl::Status ReadBytes64(Conn& c, std::string* s, uint64_t max_len, absl::Time deadline) {
  uint64_t len = 0;
  if (absl::Status st = ReadU64(c, &len, deadline); !st.ok()) return st;
  if (len > max_len) {
    return absl::InvalidArgumentError(absl::StrCat("value of ", len, " bytes exceeds the limit of ", max_len));
  }
  s->resize(len);
  return c.ReadAll(s->data(), len, deadline);
}

}  // namespace tessera::comm_internal
