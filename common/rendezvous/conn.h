#ifndef TESSERA_COMMON_RENDEZVOUS_CONN_H_
#define TESSERA_COMMON_RENDEZVOUS_CONN_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/rendezvous/socket_util.h"

typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;

namespace tessera::comm_internal {

// One store connection: a TCP socket, optionally wrapped in TLS after StartTls. Every read
// and write takes a deadline, so a silent or slow peer cannot hang the caller; the socket
// is non-blocking underneath so TLS record I/O honours the same deadlines.
class Conn {
 public:
  explicit Conn(UniqueFd fd);
  ~Conn();
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  // Runs the TLS handshake over the socket. Client side (`server` false): the peer's
  // certificate must carry `verify_name` (an IP address or a DNS name). `ctx` sets the
  // certificates and the verification; the connection keeps its own reference.
  absl::Status StartTls(SSL_CTX* ctx, bool server, absl::string_view verify_name, absl::Time deadline);

  absl::Status WriteAll(const void* data, size_t len, absl::Time deadline);
  // Reads exactly `len` bytes. A clean close before the first byte is absl::OutOfRange,
  // so a server can tell a closed connection from a broken frame.
  absl::Status ReadAll(void* data, size_t len, absl::Time deadline);

  // Wakes a thread blocked on this connection (its I/O then fails); safe from any thread.
  void Shutdown();
  // The remote address, "ip:port", for log lines.
  const std::string& peer() const { return peer_; }
  bool tls() const { return ssl_ != nullptr; }

 private:
  UniqueFd fd_;
  SSL* ssl_ = nullptr;
  std::string peer_;
};

// Little-endian framing over a connection (see kv_store_protocol.h).
absl::Status ReadU8(Conn& c, uint8_t* v, absl::Time deadline);
absl::Status ReadU32(Conn& c, uint32_t* v, absl::Time deadline);
absl::Status ReadU64(Conn& c, uint64_t* v, absl::Time deadline);
// Reads a length-prefixed byte string whose length must not exceed max_len.
absl::Status ReadBytes32(Conn& c, std::string* s, uint32_t max_len, absl::Time deadline);
absl::Status ReadBytes64(Conn& c, std::string* s, uint64_t max_len, absl::Time deadline);

}  // namespace tessera::comm_internal

#endif  // TESSERA_COMMON_RENDEZVOUS_CONN_H_
