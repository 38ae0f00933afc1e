#include "common/metrics/http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/net/fd_budget.h"
#include "prometheus/text_serializer.h"

namespace tessera {
namespace {

constexpr size_t kMaxRequestBytes = 8192;

void SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

std::string Response(int status, const std::string& content_type, const std::string& body, bool head) {
  const char* reason = status == 200   ? "OK"
                       : status == 404 ? "Not Found"
                       : status == 405 ? "Method Not Allowed"
                       : status == 400 ? "Bad Request"
                                       : "Service Unavailable";
  return absl::StrCat("HTTP/1.1 ", status, " ", reason, "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(), "\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
                      head ? "" : body);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(MetricsHttpOptions options) {
  std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer());
  s->options_ = std::move(options);
  const std::string address = absl::StrCat(s->options_.host, ":", s->options_.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = absl::StrCat(s->options_.port);
  if (int rc = ::getaddrinfo(s->options_.host.empty() ? nullptr : s->options_.host.c_str(), port.c_str(), &hints,
                             &found);
      rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics HTTP server: cannot resolve \"", s->options_.host, "\": ", gai_strerror(rc)));
  }
  std::string error = "no address";
  for (addrinfo* a = found; a != nullptr && s->listen_fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 64) == 0) {
      s->listen_fd_ = fd;
    } else {
      error = std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  if (s->listen_fd_ < 0) {
    return absl::UnavailableError(absl::StrCat("metrics HTTP server cannot listen on ", address, ": ", error));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  s->port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  s->thread_ = std::thread([self = s.get()] { self->Loop(); });
  return s;
}

MetricsHttpServer::~MetricsHttpServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void MetricsHttpServer::Loop() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    // A short poll so the destructor never waits long for the thread.
    if (::poll(&p, 1, 100) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors, the pending connection keeps the socket readable: shed it
      // rather than spin on poll().
      if (net::IsOutOfDescriptors(errno) && !net::ShedOnePendingConnection(listen_fd_)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      continue;
    }
    if (net::InFdReserve(fd)) {
      ::close(fd);
      continue;
    }
    // A client that stalls holds the (single) server thread for at most this long.
    timeval timeout{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    Serve(fd);
    ::close(fd);
  }
}

void MetricsHttpServer::Serve(int fd) {
  std::string request;
  char buf[2048];
  // One deadline for the whole request: a byte a second would otherwise pass every recv's
  // timeout and hold the one server thread (and so /readyz) forever.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (request.find("\r\n\r\n") == std::string::npos && request.find("\n\n") == std::string::npos) {
    if (std::chrono::steady_clock::now() > deadline) return;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return;
    request.append(buf, static_cast<size_t>(n));
    if (request.size() > kMaxRequestBytes) {
      SendAll(fd, Response(400, "text/plain", "request too large\n", false));
      return;
    }
  }
  // Request line: METHOD SP target SP version.
  const size_t sp1 = request.find(' ');
  const size_t sp2 = sp1 == std::string::npos ? std::string::npos : request.find(' ', sp1 + 1);
  if (sp2 == std::string::npos) {
    SendAll(fd, Response(400, "text/plain", "malformed request line\n", false));
    return;
  }
  const std::string method = request.substr(0, sp1);
  std::string path = request.substr(sp1 + 1, sp2 - sp1 - 1);
  if (const size_t q = path.find('?'); q != std::string::npos) path.resize(q);
  const bool head = method == "HEAD";
  if (method != "GET" && !head) {
    SendAll(fd, Response(405, "text/plain", "only GET and HEAD\n", false));
    return;
  }
  if (path == "/metrics") {
    SendAll(fd, Response(200, "text/plain; version=0.0.4; charset=utf-8", Metrics(), head));
    return;
  }
  auto check = options_.checks.find(path);
  if (check == options_.checks.end()) {
    SendAll(fd, Response(404, "text/plain", absl::StrCat("no endpoint ", path, "\n"), head));
    return;
  }
  const HealthResult r = check->second();
  const std::string body = r.ok ? (r.detail.empty() ? "ok\n" : absl::StrCat("ok: ", r.detail, "\n"))
                                : absl::StrCat("not ok: ", r.detail, "\n");
  SendAll(fd, Response(r.ok ? 200 : 503, "text/plain; charset=utf-8", body, head));
}

std::string MetricsHttpServer::Metrics() const {
  std::vector<prometheus::MetricFamily> families;
  for (const auto& weak : options_.collectables) {
    if (auto c = weak.lock()) {
      auto more = c->Collect();
      families.insert(families.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
    }
  }
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace tessera
