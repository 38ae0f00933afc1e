#include "common/rendezvous/socket_util.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"

namespace tessera::comm_internal {
namespace {

// Milliseconds left until `deadline`, clamped to poll()'s range; 0 when it has passed.
int PollTimeoutMs(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return -1;
  const int64_t ms =
      absl::ToInt64Milliseconds(absl::Ceil(deadline - absl::Now(), absl::Milliseconds(1)));
  if (ms <= 0) return 0;
  return ms > 1'000'000'000 ? 1'000'000'000 : static_cast<int>(ms);
}

struct AddrInfoDeleter {
  void operator()(addrinfo* ai) const { ::freeaddrinfo(ai); }
};

absl::StatusOr<std::unique_ptr<addrinfo, AddrInfoDeleter>> Resolve(absl::string_view host, int port,
                                                                   bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* result = nullptr;
  const std::string host_str(host);
  const std::string port_str = std::to_string(port);
  const int rc = ::getaddrinfo(host_str.empty() ? nullptr : host_str.c_str(), port_str.c_str(),
                               &hints, &result);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve '", host, "' port ", port, ": ", ::gai_strerror(rc)));
  }
  return std::unique_ptr<addrinfo, AddrInfoDeleter>(result);
}

}  // namespace

absl::Status WaitReady(int fd, short events, absl::Time deadline, const char* what) {
  while (true) {
    pollfd pfd{fd, events, 0};
    const int rc = ::poll(&pfd, 1, PollTimeoutMs(deadline));
    if (rc > 0) return absl::OkStatus();
    if (rc == 0) {
      return absl::DeadlineExceededError(absl::StrCat("socket ", what, " timed out (fd ", fd, ")"));
    }
    if (errno != EINTR) {
      return absl::UnavailableError(absl::StrCat("poll for ", what, ": ", std::strerror(errno)));
    }
  }
}

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<UniqueFd> ListenTcp(absl::string_view host, int port, int* bound_port) {
  auto resolved = Resolve(host, port, /*passive=*/true);
  if (!resolved.ok()) return resolved.status();
  std::string last_error = "no addresses";
  for (addrinfo* ai = resolved->get(); ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd.valid()) {
      last_error = std::strerror(errno);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd.get(), 128) != 0) {
      last_error = std::strerror(errno);
      continue;
    }
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      last_error = std::strerror(errno);
      continue;
    }
    *bound_port = addr.ss_family == AF_INET6
                      ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                      : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    return fd;
  }
  return absl::UnavailableError(
      absl::StrCat("cannot listen on ", host, ":", port, ": ", last_error));
}

absl::StatusOr<UniqueFd> ConnectTcp(absl::string_view host, int port, absl::Time deadline) {
  auto resolved = Resolve(host, port, /*passive=*/false);
  if (!resolved.ok()) return resolved.status();
  std::string last_error = "no addresses";
  do {
    for (addrinfo* ai = resolved->get(); ai != nullptr; ai = ai->ai_next) {
      UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
      if (!fd.valid()) {
        last_error = std::strerror(errno);
        continue;
      }
      if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0) {
        const int one = 1;
        ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return fd;
      }
      last_error = std::strerror(errno);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (absl::Now() < deadline);
  return absl::UnavailableError(
      absl::StrCat("cannot connect to ", host, ":", port, ": ", last_error));
}

void AppendU8(std::string& out, uint8_t v) { out.push_back(static_cast<char>(v)); }

void AppendU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void AppendU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t DecodeU32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

uint64_t DecodeU64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace tessera::comm_internal
