#ifndef TESSERA_COMMON_RENDEZVOUS_SOCKET_UTIL_H_
#define TESSERA_COMMON_RENDEZVOUS_SOCKET_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

// Plain blocking-socket helpers for the rendezvous key-value store. Every read and write
// takes a deadline so a silent peer can never hang the caller.
namespace tessera::comm_internal {

// Closes the descriptor on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

// Binds and listens on host:port (port 0 = ephemeral); returns the socket and the port.
absl::StatusOr<UniqueFd> ListenTcp(absl::string_view host, int port, int* bound_port);

// Connects to host:port, retrying refused connections until `deadline` (the server may
// not be up yet when ranks start).
absl::StatusOr<UniqueFd> ConnectTcp(absl::string_view host, int port, absl::Time deadline);

// Waits until fd is ready for `events` (poll flags); DeadlineExceeded when the deadline
// passes first.
absl::Status WaitReady(int fd, short events, absl::Time deadline, const char* what);

// Little-endian framing for the wire format.
void AppendU8(std::string& out, uint8_t v);
void AppendU32(std::string& out, uint32_t v);
void AppendU64(std::string& out, uint64_t v);
uint32_t DecodeU32(const unsigned char* p);
uint64_t DecodeU64(const unsigned char* p);

}  // namespace tessera::comm_internal

#endif  // TESSERA_COMMON_RENDEZVOUS_SOCKET_UTIL_H_
