#include "coordinator/http/http_server.h"

#include <sys/socket.h>

#include <cerrno>

#include <array>
#include <atomic>
#include <chrono>
#include <deque>
#include <optional>
#include <sstream>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "boost/asio.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "boost/beast/ssl.hpp"
#include "common/logging.h"
#include "common/memory_releaser.h"
#include "common/net/fd_budget.h"
#include "coordinator/http/sse_writer.h"
#include "coordinator/tls/ssl_context_watcher.h"

namespace tessera::http {
namespace {

namespace beast = boost::beast;
namespace net = boost::asio;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
namespace ssl = boost::asio::ssl;

// Stream: beast::tcp_stream (plaintext) or beast::ssl_stream<beast::tcp_stream> (TLS).
template <class Stream>
class Session final : public HttpExchange, public std::enable_shared_from_this<Session<Stream>> {
 public:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

  Session(const HttpServerOptions* options, std::atomic<int>* num_active_exchanges, ::tessera::net::ListenerStats* stats,
          tcp::socket socket, std::shared_ptr<ssl::context> tls_context = nullptr)
      : stream_(MakeStream(std::move(socket), tls_context.get())),
        tls_context_(std::move(tls_context)),
        options_(options),
        num_active_exchanges_(num_active_exchanges),
        stats_(stats) {
    stats_->open_connections.fetch_add(1);
  }

  ~Session() override {
    // The last of a burst (or every 256th close of a flood) gives the freed buffers back:
    // a TLS connection alone holds ~100 KB that glibc would otherwise keep.
    const int64_t left = stats_->open_connections.fetch_sub(1) - 1;
    static std::atomic<uint64_t> closed{0};
    if (left == 0 || closed.fetch_add(1) % 256 == 255) MemoryReleaser::Get().RequestTrim();
  }

  void Start() {
    net::dispatch(stream_.get_executor(), [self = this->shared_from_this()] {
      if constexpr (kTls) {
        // Bounded, so a client that connects and never completes a handshake is dropped.
        self->Tcp().expires_after(std::chrono::seconds(self->options_->handshake_timeout_seconds));
        self->stream_.async_handshake(ssl::stream_base::server, [self](beast::error_code ec) {
          if (ec) {
            self->Gone();
            return;
          }
          self->DoRead();
        });
      } else {
        self->DoRead();
      }
    });
  }

  const HttpRequest& request() const override { return request_; }

  void Post(std::function<void()> fn) override {
    net::post(stream_.get_executor(), [self = this->shared_from_this(), fn = std::move(fn)] { fn(); });
  }

  void Respond(int status, std::string body, std::string content_type,
               std::vector<std::pair<std::string, std::string>> headers) override {
    if (!in_exchange_ || started_) return;
    started_ = true;
    status_ = status;
    bhttp::response<bhttp::string_body> res;
    res.version(11);
    res.result(static_cast<unsigned>(status));
    res.set(bhttp::field::server, "tessera");
    res.set(bhttp::field::content_type, content_type);
    for (auto& [name, value] : headers) res.set(name, value);
    res.keep_alive(keep_alive_);
    res.body() = std::move(body);
    res.prepare_payload();
    std::ostringstream out;
    out << res;
    Enqueue({out.str(), nullptr, /*last=*/true});
  }

  void StartStream(int status, std::string content_type) override {
    if (!in_exchange_ || started_) return;
    started_ = true;
    status_ = status;
    bhttp::response<bhttp::empty_body> res;
    res.version(11);
    res.result(static_cast<unsigned>(status));
    res.set(bhttp::field::server, "tessera");
    res.set(bhttp::field::content_type, content_type);
    res.set(bhttp::field::cache_control, "no-cache");
    // Proxies that buffer (nginx) would hold the events back.
    res.set("X-Accel-Buffering", "no");
    res.keep_alive(keep_alive_);
    res.chunked(true);
    std::ostringstream out;
    out << res.base();
    Enqueue({out.str(), nullptr, /*last=*/false});
  }

  void Write(std::string data, std::function<void(bool)> done) override {
    Enqueue({HttpChunk(data), std::move(done), /*last=*/false});
  }

  void EndStream() override { Enqueue({HttpLastChunk(), nullptr, /*last=*/true}); }

  void OnClientGone(std::function<void()> fn) override {
    if (in_exchange_) client_gone_ = std::move(fn);
  }

  void Abort() override {
    client_gone_ = nullptr;
    Gone();
  }

 private:
  struct Piece {
    std::string bytes;
    std::function<void(bool)> done;
    bool last = false;  // Ends the exchange.
  };

  void DoRead() {
    parser_.emplace();
    parser_->body_limit(options_->max_body_bytes);
    parser_->header_limit(64 << 10);
    if (num_served_ > 0 && buffer_.size() == 0) {
      // Between requests: the idle timeout runs until the next one's first byte, then the
      // header deadline.
      Tcp().expires_after(std::chrono::seconds(options_->idle_timeout_seconds));
      stream_.async_read_some(buffer_.prepare(4096),
                              [self = this->shared_from_this()](beast::error_code ec, size_t n) {
                                if (self->gone_) return;
                                if (ec) {
                                  self->OnRead(ec);
                                  return;
                                }
                                self->buffer_.commit(n);
                                self->ReadHeader();
                              });
      return;
    }
    ReadHeader();
  }

  // One deadline for the whole header, not per read: a byte every few seconds does not
  // keep a connection alive.
  void ReadHeader() {
    Tcp().expires_after(std::chrono::seconds(options_->header_timeout_seconds));
    bhttp::async_read_header(stream_, buffer_, *parser_,
                             [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  // The body's deadline follows its size at the minimum rate (the largest allowed body when
  // chunked), and is never shorter than the header deadline.
  void SetBodyDeadline() {
    const uint64_t expected = parser_->content_length().value_or(options_->max_body_bytes);
    const uint64_t rate = static_cast<uint64_t>(std::max<int64_t>(1, options_->min_body_bytes_per_second));
    const uint64_t seconds = std::max<uint64_t>(options_->header_timeout_seconds, (expected + rate - 1) / rate);
    Tcp().expires_after(std::chrono::seconds(seconds));
  }

  // The header alone first: a client that sent `Expect: 100-continue` (curl does for
  // bodies over 1 KiB) waits for the interim answer before it sends the body, and a body
  // over the limit is refused from its Content-Length before any of it is sent.
  void OnHeader(beast::error_code ec) {
    if (gone_) return;
    if (ec) {
      OnRead(ec);
      return;
    }
    auto read_body = [self = this->shared_from_this()] {
      self->SetBodyDeadline();
      bhttp::async_read(self->stream_, self->buffer_, *self->parser_,
                        [self](beast::error_code ec, size_t) { self->OnRead(ec); });
    };
    if (beast::iequals(parser_->get()[bhttp::field::expect], "100-continue")) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(stream_, net::buffer(kContinue),
                       [self = this->shared_from_this(), read_body](beast::error_code ec, size_t) {
                         if (ec) {
                           self->Gone();
                           return;
                         }
                         read_body();
                       });
      return;
    }
    read_body();
  }

  void OnRead(beast::error_code ec) {
    if (gone_) return;
    Tcp().expires_never();
    if (ec == bhttp::error::body_limit) {
      // Answered at once, from the Content-Length: the rest of the body is never parsed.
      RespondAndClose(413, absl::StrCat("the request body exceeds ", options_->max_body_bytes,
                                        " bytes (--max-input-bytes)"));
      return;
    }
    if (ec == bhttp::error::header_limit) {
      RespondAndClose(431, "the request headers exceed 64 KiB");
      return;
    }
    if (ec.category() == beast::http::make_error_code(bhttp::error::bad_target).category() &&
        ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
      // Not HTTP/1.x: say so rather than drop the connection without a word.
      RespondAndClose(400, absl::StrCat("malformed HTTP request: ", ec.message()));
      return;
    }
    if (ec) {
      // End of stream, idle timeout, or a reset: nothing to answer.
      Gone();
      return;
    }
    bhttp::request<bhttp::string_body>& msg = parser_->get();
    request_.method = std::string(msg.method_string());
    const beast::string_view target = msg.target();
    request_.path = std::string(target.substr(0, target.find('?')));
    request_.body = std::move(msg.body());
    request_.authorization = std::string(msg[bhttp::field::authorization]);
    request_.content_type = std::string(msg[bhttp::field::content_type]);
    keep_alive_ = msg.keep_alive();
    ++num_served_;
    SetInExchange(true);
    started_ = false;
    status_ = 0;
    start_ = std::chrono::steady_clock::now();
    ++exchange_id_;
    WatchForClose();
    options_->handler(this->shared_from_this());
  }

  // An error the server answers by itself, before any handler; the connection closes.
  void RespondAndClose(int status, const std::string& message) {
    SetInExchange(true);
    started_ = false;
    keep_alive_ = false;
    request_ = HttpRequest{};
    start_ = std::chrono::steady_clock::now();
    Respond(status, options_->error_body(status, message), "application/json", {});
  }

  // While a request runs the client sends nothing more (no pipelining in practice), so
  // the socket turning readable with no bytes means it closed: the request is cancelled
  // at once instead of at its next write, and a unary request or one still queued frees
  // its slot too.
  void WatchForClose() {
    Tcp().socket().async_wait(tcp::socket::wait_read,
                                [self = this->shared_from_this(), id = exchange_id_](beast::error_code ec) {
                                  if (id != self->exchange_id_ || !self->in_exchange_) return;
                                  if (ec == net::error::operation_aborted) return;
                                  if (ec) {
                                    self->Gone();
                                    return;
                                  }
                                  // The reactor can report readiness spuriously (edge-triggered
                                  // epoll), so ask the socket: 0 is the peer's FIN, EAGAIN a false
                                  // alarm (watch again), bytes a pipelined request (read after this
                                  // one), any other error a reset.
                                  char byte;
                                  const ssize_t n = ::recv(self->Tcp().socket().native_handle(), &byte, 1,
                                                           MSG_PEEK | MSG_DONTWAIT);
                                  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                                    self->Gone();
                                  } else if (n < 0) {
                                    self->WatchForClose();
                                  }
                                });
  }

  void Enqueue(Piece piece) {
    if (gone_) {
      if (piece.done) Post([done = std::move(piece.done)] { done(false); });
      return;
    }
    queue_.push_back(std::move(piece));
    if (!writing_) WriteNext();
  }

  void WriteNext() {
    if (queue_.empty()) {
      writing_ = false;
      return;
    }
    writing_ = true;
    // A client that stops reading stalls this write: it ends the connection after the idle
    // timeout instead of holding it (and its request) forever.
    Tcp().expires_after(std::chrono::seconds(options_->idle_timeout_seconds));
    net::async_write(stream_, net::buffer(queue_.front().bytes),
                     [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnWritten(ec); });
  }

  void OnWritten(beast::error_code ec) {
    if (gone_ || queue_.empty()) return;
    Piece piece = std::move(queue_.front());
    queue_.pop_front();
    if (ec) {
      writing_ = false;
      if (piece.done) piece.done(false);
      Gone();
      return;
    }
    if (piece.done) piece.done(true);
    if (piece.last) {
      EndExchange();
      return;
    }
    WriteNext();
  }

  // Keeps the server's count of exchanges in flight, which Stop waits for.
  void SetInExchange(bool in) {
    if (in == in_exchange_) return;
    in_exchange_ = in;
    num_active_exchanges_->fetch_add(in ? 1 : -1);
  }

  // One line per request: the HTTP side of the request log (the engine logs what it
  // generated). Health probes only at debug level, they come every few seconds.
  void LogExchange(bool client_gone) {
    const LogLevel level = request_.path == "/health" ? LogLevel::kDebug : LogLevel::kInfo;
    if (!LogEnabled(level)) return;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    // 499 (nginx's "client closed request") when the client left before an answer began.
    const int64_t status = client_gone && status_ == 0 ? 499 : status_;
    Log(level, "tessera-coordinator", client_gone ? "http request: client went away" : "http request",
        {{"protocol", std::string("http")},
         {"method", request_.method},
         {"path", request_.path},
         {"status", status},
         {"duration_seconds", seconds}});
  }

  void EndExchange() {
    LogExchange(/*client_gone=*/false);
    SetInExchange(false);
    writing_ = false;
    client_gone_ = nullptr;
    ++exchange_id_;
    beast::error_code ignored;
    Tcp().socket().cancel(ignored);  // The close watch.
    if (!keep_alive_) {
      gone_ = true;
      if constexpr (kTls) {
        // close_notify first: TLS clients reading to the end of the stream treat a bare
        // TCP close as truncation. It also waits (bounded) for the client's close.
        Tcp().expires_after(std::chrono::seconds(5));
        stream_.async_shutdown([self = this->shared_from_this()](beast::error_code) { self->Tcp().close(); });
        return;
      }
      Tcp().socket().shutdown(tcp::socket::shutdown_send, ignored);
      // Read (and drop) what the client still sends before closing: closing with unread
      // bytes resets the connection, and a client still sending a body refused with 413
      // would see the reset instead of the answer.
      Tcp().expires_after(std::chrono::seconds(5));
      Linger();
      return;
    }
    DoRead();
  }

  void Linger() {
    if (drain_ == nullptr) drain_ = std::make_unique<std::array<char, 16384>>();
    stream_.async_read_some(net::buffer(*drain_), [self = this->shared_from_this()](beast::error_code ec, size_t) {
      if (ec) {
        self->Tcp().close();
        return;
      }
      self->Linger();
    });
  }

  // The connection is over: tell the handler (once) and fail what was queued.
  void Gone() {
    if (gone_) return;
    gone_ = true;
    const bool was_in_exchange = in_exchange_;
    if (was_in_exchange) LogExchange(/*client_gone=*/true);
    SetInExchange(false);
    std::function<void()> client_gone = std::move(client_gone_);
    client_gone_ = nullptr;
    std::deque<Piece> queue = std::move(queue_);
    queue_.clear();
    beast::error_code ignored;
    Tcp().socket().shutdown(tcp::socket::shutdown_both, ignored);
    Tcp().close();
    for (Piece& p : queue) {
      if (p.done) p.done(false);
    }
    if (was_in_exchange && client_gone) client_gone();
  }

  static Stream MakeStream(tcp::socket socket, ssl::context* tls_context) {
    if constexpr (kTls) {
      return Stream(std::move(socket), *tls_context);
    } else {
      return Stream(std::move(socket));
    }
  }

  beast::tcp_stream& Tcp() { return beast::get_lowest_layer(stream_); }

  Stream stream_;
  // Held for the connection's life: the watcher may have replaced it for new connections.
  std::shared_ptr<ssl::context> tls_context_;
  const HttpServerOptions* const options_;
  std::atomic<int>* const num_active_exchanges_;
  ::tessera::net::ListenerStats* const stats_;
  uint64_t num_served_ = 0;  // Requests read on this connection.
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  HttpRequest request_;
  bool keep_alive_ = true;
  bool in_exchange_ = false;  // A request was read and is not answered yet.
  bool started_ = false;      // Respond or StartStream was called for it.
  int status_ = 0;            // What it was answered with (0: nothing yet).
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  bool writing_ = false;
  bool gone_ = false;
  uint64_t exchange_id_ = 0;
  std::deque<Piece> queue_;
  std::function<void()> client_gone_;
  // Linger's scratch, only for connections that linger: idle ones stay small.
  std::unique_ptr<std::array<char, 16384>> drain_;
};

}  // namespace

struct HttpServer::Impl {
  explicit Impl(HttpServerOptions o) : options(std::move(o)), ioc(options.num_threads), acceptor(ioc) {}

  absl::Status Listen() {
    beast::error_code ec;
    acceptor.open(endpoint.protocol(), ec);
    if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor.bind(endpoint, ec);
    if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
    if (ec) {
      beast::error_code ignored;
      acceptor.close(ignored);
      return absl::UnavailableError(
          absl::StrCat("cannot listen on ", options.host, ":", endpoint.port(), ": ", ec.message()));
    }
    endpoint = acceptor.local_endpoint();  // The port, when 0 was asked for.
    return absl::OkStatus();
  }

  void Accept() {
    acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
      if (stopping.load()) return;
      if (ec) {
        OnAcceptError(ec);
        return;
      }
      const char* refused = nullptr;
      if (tessera::net::InFdReserve(socket.native_handle())) {
        refused = "the descriptor reserve is reached (--fd-reserve)";
      } else if (stats.open_connections.load() >= options.max_connections) {
        refused = "too many open connections (--max-connections)";
      }
      if (refused != nullptr) {
        beast::error_code ignored;
        socket.close(ignored);
        stats.refused.fetch_add(1);
        refusals.Refused(stats, refused);
        Accept();
        return;
      }
      beast::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);  // SSE events are small and latency matters.
      // A fixed send buffer instead of the kernel's autotuning (up to tcp_wmem's 4 MB): a
      // client that stops reading then blocks the stream's writes after this much, so the
      // RequestStream bound (--max-undelivered-tokens) ends its request, as HTTP/2 flow
      // control does for gRPC, instead of megabytes per connection piling up in the kernel.
      if (options.send_buffer_bytes > 0) {
        socket.set_option(net::socket_base::send_buffer_size(options.send_buffer_bytes), ignored);
      }
      if (tls_watcher != nullptr) {
        std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(&options, &num_active_exchanges, &stats,
                                                                        std::move(socket), tls_watcher->Current())
            ->Start();
      } else {
        std::make_shared<Session<beast::tcp_stream>>(&options, &num_active_exchanges, &stats, std::move(socket))
            ->Start();
      }
      Accept();
    });
  }

  void OnAcceptError(const beast::error_code& ec) {
    if (ec == net::error::operation_aborted && !acceptor.is_open()) return;
    if (tessera::net::IsOutOfDescriptors(ec.value())) {
      // Shed the pending connection so the backlog drains and the loop does not spin on a
      // socket that stays readable; back off briefly when even that fails.
      stats.refused.fetch_add(1);
      refusals.Refused(stats, "the process is out of file descriptors");
      if (tessera::net::ShedOnePendingConnection(acceptor.native_handle())) {
        Accept();
      } else {
        RetryAfter(std::chrono::milliseconds(50), [this] { Accept(); });
      }
      return;
    }
    if (ec == net::error::connection_aborted || ec == net::error::interrupted || ec == net::error::try_again ||
        ec.value() == EPROTO) {
      Accept();
      return;
    }
    // The listening socket itself failed: readiness is off until it is reopened.
    Log(LogLevel::kError, "listener", "accept failed; reopening the listening socket",
        {{"listener", stats.name}, {"port", int64_t{stats.port.load()}}, {"error", ec.message()}});
    stats.accepting = false;
    beast::error_code ignored;
    acceptor.close(ignored);
    Reopen();
  }

  void Reopen() {
    RetryAfter(std::chrono::seconds(1), [this] {
      if (absl::Status s = Listen(); !s.ok()) {
        Reopen();
        return;
      }
      stats.accepting = true;
      Log(LogLevel::kInfo, "listener", "listening again", {{"listener", stats.name}, {"port", int64_t{stats.port.load()}}});
      Accept();
    });
  }

  void RetryAfter(std::chrono::milliseconds delay, std::function<void()> fn) {
    retry_timer.expires_after(delay);
    retry_timer.async_wait([this, fn = std::move(fn)](beast::error_code ec) {
      if (ec || stopping.load()) return;
      fn();
    });
  }

  // Every few seconds on the I/O threads: cheap (three stat calls) unless the files changed.
  void PollTls() {
    tls_timer.expires_after(std::chrono::seconds(2));
    tls_timer.async_wait([this](beast::error_code ec) {
      if (ec) return;
      tls_watcher->Poll();
      PollTls();
    });
  }

  HttpServerOptions options;
  net::io_context ioc;
  tcp::endpoint endpoint;
  // Accept, its error handling and Reopen run one at a time (each starts the next), so the
  // acceptor needs no strand.
  tcp::acceptor acceptor;
  std::unique_ptr<tls::SslContextWatcher> tls_watcher;  // Null: plaintext.
  net::steady_timer tls_timer{ioc};
  net::steady_timer retry_timer{ioc};
  std::vector<std::thread> threads;
  std::atomic<int> num_active_exchanges{0};
  tessera::net::ListenerStats stats;
  tessera::net::RefusalLog refusals;
  std::atomic<bool> stopping{false};
  bool stopped = false;
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Stop(); }

int HttpServer::port() const { return impl_->stats.port.load(); }

const tessera::net::ListenerStats& HttpServer::stats() const { return impl_->stats; }

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(HttpServerOptions options) {
  if (!options.handler || !options.error_body) return absl::InvalidArgumentError("HttpServer needs a handler");
  auto impl = std::make_unique<Impl>(std::move(options));
  beast::error_code ec;
  const net::ip::address address = net::ip::make_address(impl->options.host, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("bad HTTP host ", impl->options.host, ": ", ec.message()));
  if (impl->options.max_connections < 1) return absl::InvalidArgumentError("max_connections must be positive");
  impl->endpoint = tcp::endpoint(address, static_cast<uint16_t>(impl->options.port));
  if (absl::Status s = impl->Listen(); !s.ok()) return s;
  impl->stats.name = "http";
  impl->stats.port = impl->endpoint.port();
  impl->stats.max_connections = impl->options.max_connections;
  if (impl->options.tls.enabled()) {
    auto watcher = tls::SslContextWatcher::Create(impl->options.tls);
    if (!watcher.ok()) return watcher.status();
    impl->tls_watcher = std::move(*watcher);
    impl->PollTls();
  }
  impl->Accept();
  for (int i = 0; i < std::max(1, impl->options.num_threads); ++i) {
    impl->threads.emplace_back([ioc = &impl->ioc] { ioc->run(); });
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

void HttpServer::Stop(std::chrono::milliseconds grace) {
  if (impl_->stopped) return;
  impl_->stopped = true;
  impl_->stopping = true;
  net::post(impl_->ioc, [impl = impl_.get()] {
    beast::error_code ignored;
    impl->acceptor.close(ignored);
    impl->tls_timer.cancel();
    impl->retry_timer.cancel();
  });
  // Answers whose last bytes are still being written (a drained request's final chunk and
  // [DONE]) get `grace` to go out; idle keep-alive connections do not hold it up.
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (impl_->num_active_exchanges.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  impl_->ioc.stop();
  for (std::thread& t : impl_->threads) t.join();
}

}  // namespace tessera::http
