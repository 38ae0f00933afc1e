#include "common/net/grpc_listener.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/memory_releaser.h"
#include "common/net/fd_budget.h"
#include "common/rendezvous/socket_util.h"

namespace tessera::net {
namespace {

absl::StatusOr<int> OpenListeningSocket(const std::string& host, int port, int* bound_port) {
  auto fd = comm_internal::ListenTcp(host, port, bound_port);
  if (!fd.ok()) return fd.status();
  const int raw = fd->release();
  // Non-blocking: the loop accepts until EAGAIN.
  ::fcntl(raw, F_SETFL, ::fcntl(raw, F_GETFL) | O_NONBLOCK);
  // A deep backlog: a flood waits in the kernel (costing no descriptor) while we shed.
  ::listen(raw, SOMAXCONN);
  return raw;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcListener>> GrpcListener::Bind(GrpcListenerOptions options) {
  if (options.max_connections < 1) {
    return absl::InvalidArgumentError(absl::StrCat(options.name, ": max_connections must be positive"));
  }
  std::unique_ptr<GrpcListener> l(new GrpcListener(std::move(options)));
  int bound = 0;
  auto fd = OpenListeningSocket(l->options_.host, l->options_.port, &bound);
  if (!fd.ok()) return fd.status();
  l->listen_fd_ = *fd;
  l->stats_.name = l->options_.name;
  l->stats_.port = bound;
  l->stats_.max_connections = l->options_.max_connections;
  l->wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (l->wake_fd_ < 0) return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  return l;
}

GrpcListener::~GrpcListener() {
  Stop();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void GrpcListener::AddTo(grpc::ServerBuilder& builder, std::shared_ptr<grpc::ServerCredentials> credentials) {
  acceptor_ = builder.experimental().AddExternalConnectionAcceptor(
      grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD, std::move(credentials));
}

void GrpcListener::Start() {
  if (thread_.joinable() || acceptor_ == nullptr) return;
  thread_ = std::thread([this] { Loop(); });
}

void GrpcListener::Stop() {
  if (stop_.exchange(true)) return;
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }
  if (thread_.joinable()) thread_.join();
  const int fd = listen_fd_.exchange(-1);
  if (fd >= 0) ::close(fd);
}

void GrpcListener::Loop() {
  auto last_sweep = std::chrono::steady_clock::now();
  while (!stop_.load()) {
    const int fd = listen_fd_.load();
    if (fd < 0) {
      Reopen();
      continue;
    }
    pollfd p[2] = {{fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    const int n = ::poll(p, 2, 250);
    if (stop_.load()) break;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_sweep > std::chrono::milliseconds(500)) {
      Sweep();
      last_sweep = now;
    }
    if (n > 0 && (p[0].revents & (POLLIN | POLLERR | POLLHUP | POLLNVAL)) != 0) AcceptPending();
  }
}

void GrpcListener::AcceptPending() {
  // A bounded batch, so sweeps and Stop() are not held up by a flood.
  for (int i = 0; i < 256 && !stop_.load(); ++i) {
    const int fd = ::accept4(listen_fd_.load(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      Hand(fd);
      continue;
    }
    const int error = errno;
    if (error == EAGAIN || error == EWOULDBLOCK) return;
    if (error == EINTR || error == ECONNABORTED || error == EPROTO) continue;
    if (IsOutOfDescriptors(error)) {
      stats_.refused.fetch_add(1);
      refusals_.Refused(stats_, "the process is out of file descriptors");
      if (!ShedOnePendingConnection(listen_fd_.load())) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        return;
      }
      continue;
    }
    // The socket itself failed (EINVAL after a shutdown, EBADF, ENOTSOCK...): a listener
    // that stops here would leave the port dead behind a healthy process.
    Log(LogLevel::kError, "listener", "accept failed; reopening the listening socket",
        {{"listener", options_.name}, {"port", int64_t{stats_.port.load()}}, {"error", std::string(std::strerror(error))}});
    stats_.accepting = false;
    const int old = listen_fd_.exchange(-1);
    if (old >= 0) ::close(old);
    return;
  }
}

void GrpcListener::Hand(int fd) {
  const char* refused = nullptr;
  if (InFdReserve(fd)) {
    refused = "the descriptor reserve is reached (--fd-reserve)";
  } else if (static_cast<int64_t>(connections_.size()) >= options_.max_connections) {
    Sweep();  // Maybe some closed since the last sweep.
    if (static_cast<int64_t>(connections_.size()) >= options_.max_connections) {
      refused = "too many open connections";
    }
  }
  if (refused != nullptr) {
    ::close(fd);
    stats_.refused.fetch_add(1);
    refusals_.Refused(stats_, refused);
    return;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return;
  }
  connections_[fd] = st.st_ino;
  stats_.open_connections = static_cast<int64_t>(connections_.size());
  grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters params;
  params.listener_fd = listen_fd_.load();
  params.fd = fd;
  acceptor_->HandleNewConnection(&params);
}

void GrpcListener::Sweep() {
  size_t closed = 0;
  for (auto it = connections_.begin(); it != connections_.end();) {
    struct stat st {};
    if (::fstat(it->first, &st) != 0 || st.st_ino != it->second) {
      it = connections_.erase(it);
      ++closed;
    } else {
      ++it;
    }
  }
  stats_.open_connections = static_cast<int64_t>(connections_.size());
  // Many closed at once (a flood ended): give their buffers back to the system.
  if (closed >= 64) MemoryReleaser::Get().RequestTrim();
}

void GrpcListener::Reopen() {
  int bound = 0;
  auto fd = OpenListeningSocket(options_.host, stats_.port.load(), &bound);
  if (fd.ok()) {
    listen_fd_ = *fd;
    stats_.accepting = true;
    Log(LogLevel::kInfo, "listener", "listening again", {{"listener", options_.name}, {"port", int64_t{bound}}});
    return;
  }
  // Readiness stays off; try again shortly (the port may be held by a lingering socket).
  for (int i = 0; i < 10 && !stop_.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

}  // namespace tessera::net
