#ifndef TESSERA_COORDINATOR_HTTP_HTTP_EXCHANGE_H_
#define TESSERA_COORDINATOR_HTTP_HTTP_EXCHANGE_H_

#include <functional>
#include <string>
#include <utility>
#include <vector>

// One HTTP request and its answer, as handlers see it: no Boost types, so handlers (and
// their tests) compile without Beast. The server (http_server.cc) implements it.
namespace tessera::http {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // The target without its query string.
  std::string body;
  std::string authorization;  // The Authorization header (empty: none).
  std::string content_type;   // The Content-Type header (empty: none).
};

// Every method runs on the exchange's strand: a handler is called there, and so are the
// callbacks below; work from other threads (the engine's) comes in through Post. All
// calls after the client went away are ignored.
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;

  virtual const HttpRequest& request() const = 0;

  // Runs `fn` on the strand. Safe from any thread.
  virtual void Post(std::function<void()> fn) = 0;

  // A whole response (Content-Length). Ends the exchange.
  virtual void Respond(int status, std::string body, std::string content_type = "application/json",
                       std::vector<std::pair<std::string, std::string>> headers = {}) = 0;

  // A streamed response: the status line and headers (chunked transfer coding), then
  // pieces written in order. `done(ok)` runs once the piece is on the wire (ok) or the
  // connection failed (not ok); a writer that waits for it before writing again keeps
  // one piece in flight, so a client that does not read cannot make the server buffer.
  virtual void StartStream(int status, std::string content_type) = 0;
  virtual void Write(std::string data, std::function<void(bool ok)> done) = 0;
  // Ends the stream (the last chunk). Ends the exchange.
  virtual void EndStream() = 0;

  // Called once when the client goes away (closes or resets the connection) before the
  // exchange ended: the handler cancels its work.
  virtual void OnClientGone(std::function<void()> fn) = 0;
  // Drops the connection (the handler gives up on the exchange).
  virtual void Abort() = 0;
};

}  // namespace tessera::http

#endif  // TESSERA_COORDINATOR_HTTP_HTTP_EXCHANGE_H_
