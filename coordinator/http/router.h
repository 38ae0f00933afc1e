#ifndef TESSERA_COORDINATOR_HTTP_ROUTER_H_
#define TESSERA_COORDINATOR_HTTP_ROUTER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "coordinator/http/http_exchange.h"

namespace tessera::http {

// Whether a Content-Type header names JSON: application/json, any case, with or without
// parameters ("; charset=utf-8").
bool IsJsonContentType(const std::string& content_type);

// Exact-path routing: 404 for an unknown path, 405 (with Allow) for a known path and
// another method, and 415 for a POST whose body is not declared JSON (a browser sends
// text/plain or a form cross-origin without a CORS preflight; JSON needs one), all in
// OpenAI's error shape.
class Router {
 public:
  using Handler = std::function<void(std::shared_ptr<HttpExchange>)>;

  void Add(const std::string& method, const std::string& path, Handler handler);
  void Dispatch(std::shared_ptr<HttpExchange> exchange) const;

 private:
  std::map<std::string, std::map<std::string, Handler>> routes_;  // path -> method -> handler.
};

}  // namespace tessera::http

#endif  // TESSERA_COORDINATOR_HTTP_ROUTER_H_
