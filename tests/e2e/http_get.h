#ifndef TESSERA_TESTS_E2E_HTTP_GET_H_
#define TESSERA_TESTS_E2E_HTTP_GET_H_

// A plain HTTP/1.0 GET for the end-to-end tests (/metrics, /healthz, Prometheus' API).

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"

namespace tessera::testing {

struct HttpResponse {
  int status = 0;  // 0: no answer.
  std::string body;
};

// One HTTP/1.0 request to 127.0.0.1: `body` (with `content_type`, JSON by default) when
// not empty, an Authorization header when `authorization` is not empty; waits at most
// `timeout_s` for each read.
inline HttpResponse HttpRequest(int port, const std::string& method, const std::string& target,
                                const std::string& body = "",
                                const std::string& authorization = "", int timeout_s = 5,
                                const std::string& content_type = "application/json") {
  HttpResponse out;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return out;
  timeval tv{timeout_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return out;
  }
  std::string request = absl::StrCat(method, " ", target, " HTTP/1.0\r\nHost: 127.0.0.1\r\n");
  if (!authorization.empty()) absl::StrAppend(&request, "Authorization: ", authorization, "\r\n");
  if (!body.empty()) {
    absl::StrAppend(&request, "Content-Type: ", content_type, "\r\nContent-Length: ", body.size(), "\r\n");
  }
  absl::StrAppend(&request, "\r\n", body);
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return out;
  }
  std::string raw;
  char buf[8192];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) raw.append(buf, n);
  ::close(fd);
  const size_t space = raw.find(' ');
  const size_t header_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/", 0) != 0 || space == std::string::npos || header_end == std::string::npos) return out;
  out.status = std::atoi(raw.c_str() + space + 1);
  out.body = raw.substr(header_end + 4);
  return out;
}

// A plain HTTP/1.0 GET on 127.0.0.1; enough for /metrics, /healthz and Prometheus' API.
inline HttpResponse HttpGet(int port, const std::string& target) {
  return HttpRequest(port, "GET", target);
}

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_E2E_HTTP_GET_H_
