// The Beast server and the router on loopback, with handlers that stand in for the OpenAI
// ones: whole responses, keep-alive, routing errors, 413, malformed requests, chunked
// streams, and the client-gone callback.
#include "coordinator/http/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "coordinator/http/router.h"
#include "gtest/gtest.h"

namespace tessera::http {
namespace {

int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

void Send(int fd, const std::string& data) {
  ASSERT_EQ(::send(fd, data.data(), data.size(), MSG_NOSIGNAL), static_cast<ssize_t>(data.size()));
}

// Everything until the server closes (or 10 s pass).
std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, n);
  return out;
}

// Reads until `marker` has arrived.
std::string ReadUntil(int fd, const std::string& marker) {
  std::string out;
  char buf[4096];
  while (!absl::StrContains(out, marker)) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, n);
  }
  return out;
}

std::string Post(const std::string& path, const std::string& body, bool close = false) {
  return absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ", body.size(), "\r\n",
                      close ? "Connection: close\r\n" : "", "\r\n", body);
}

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    router_.Add("POST", "/echo", [](std::shared_ptr<HttpExchange> ex) { ex->Respond(200, ex->request().body); });
    router_.Add("POST", "/stream", [](std::shared_ptr<HttpExchange> ex) {
      ex->StartStream(200, "text/event-stream");
      ex->Write("data: 1\n\n", [ex](bool ok) {
        ASSERT_TRUE(ok);
        ex->Write("data: 2\n\n", [ex](bool ok2) {
          ASSERT_TRUE(ok2);
          ex->EndStream();
        });
      });
    });
    router_.Add("POST", "/hang", [this](std::shared_ptr<HttpExchange> ex) {
      // Never answers; keeps the exchange alive until the client goes.
      ex->OnClientGone([this, ex] { gone_.set_value(ex->request().path); });
    });
    HttpServerOptions o;
    o.port = 0;
    o.max_body_bytes = 1000;
    o.handler = [this](std::shared_ptr<HttpExchange> ex) { router_.Dispatch(std::move(ex)); };
    o.error_body = [](int status, const std::string& message) { return absl::StrCat(status, ":", message); };
    auto server = HttpServer::Start(std::move(o));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  Router router_;
  std::promise<std::string> gone_;
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerTest, KeepAliveServesSeveralRequests) {
  const int fd = Connect(server_->port());
  Send(fd, Post("/echo", "one"));
  EXPECT_TRUE(absl::EndsWith(ReadUntil(fd, "one"), "\r\n\r\none"));
  Send(fd, Post("/echo", "two", /*close=*/true));
  const std::string second = ReadAll(fd);
  EXPECT_TRUE(absl::StartsWith(second, "HTTP/1.1 200 OK\r\n")) << second;
  EXPECT_TRUE(absl::EndsWith(second, "two")) << second;
  ::close(fd);
}

TEST_F(HttpServerTest, UnknownPathIs404AndWrongMethodIs405) {
  int fd = Connect(server_->port());
  Send(fd, Post("/nope", "", true));
  std::string r = ReadAll(fd);
  EXPECT_TRUE(absl::StartsWith(r, "HTTP/1.1 404")) << r;
  EXPECT_TRUE(absl::StrContains(r, "\"error\"")) << r;
  ::close(fd);
  fd = Connect(server_->port());
  Send(fd, "GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  r = ReadAll(fd);
  EXPECT_TRUE(absl::StartsWith(r, "HTTP/1.1 405")) << r;
  EXPECT_TRUE(absl::StrContains(r, "Allow: POST")) << r;
  ::close(fd);
}

TEST_F(HttpServerTest, BodyOverTheLimitIs413) {
  const int fd = Connect(server_->port());
  Send(fd, Post("/echo", std::string(5000, 'x')));
  const std::string r = ReadAll(fd);
  EXPECT_TRUE(absl::StartsWith(r, "HTTP/1.1 413")) << r;
  EXPECT_TRUE(absl::StrContains(r, "413:the request body exceeds 1000 bytes")) << r;
  ::close(fd);
}

TEST_F(HttpServerTest, ExpectContinueGetsAnInterimAnswerBeforeTheBody) {
  const int fd = Connect(server_->port());
  Send(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
  EXPECT_EQ(ReadUntil(fd, "\r\n\r\n"), "HTTP/1.1 100 Continue\r\n\r\n");
  Send(fd, "hello");
  EXPECT_TRUE(absl::EndsWith(ReadUntil(fd, "hello"), "\r\n\r\nhello"));
  ::close(fd);
}

TEST_F(HttpServerTest, ExpectContinueWithATooLargeBodyIs413AtOnce) {
  const int fd = Connect(server_->port());
  Send(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n");
  const std::string r = ReadAll(fd);
  EXPECT_TRUE(absl::StartsWith(r, "HTTP/1.1 413")) << r;
  ::close(fd);
}

TEST_F(HttpServerTest, MalformedRequestIs400) {
  const int fd = Connect(server_->port());
  Send(fd, "NOT HTTP AT ALL\r\n\r\n");
  const std::string r = ReadAll(fd);
  EXPECT_TRUE(absl::StartsWith(r, "HTTP/1.1 400")) << r;
  ::close(fd);
}

TEST_F(HttpServerTest, StreamIsChunked) {
  const int fd = Connect(server_->port());
  Send(fd, Post("/stream", "", true));
  const std::string r = ReadAll(fd);
  EXPECT_TRUE(absl::StrContains(r, "Transfer-Encoding: chunked")) << r;
  EXPECT_TRUE(absl::StrContains(r, "Content-Type: text/event-stream")) << r;
  EXPECT_TRUE(absl::EndsWith(r, "\r\n\r\n9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n")) << r;
  ::close(fd);
}

TEST_F(HttpServerTest, ClientThatLeavesIsNoticedWithoutAWrite) {
  const int fd = Connect(server_->port());
  Send(fd, Post("/hang", "x"));
  std::future<std::string> gone = gone_.get_future();
  // Still there: no callback.
  EXPECT_EQ(gone.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  ::close(fd);
  ASSERT_EQ(gone.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(gone.get(), "/hang");
}

}  // namespace
}  // namespace tessera::http
