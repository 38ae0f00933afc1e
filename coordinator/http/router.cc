#include "coordinator/http/router.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/http/generation_call.h"
#include "coordinator/http/openai_response.h"

namespace tessera::http {

bool IsJsonContentType(const std::string& content_type) {
  absl::string_view type = content_type;
  if (const size_t semicolon = type.find(';'); semicolon != absl::string_view::npos) type = type.substr(0, semicolon);
  return absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(type), "application/json");
}

void Router::Add(const std::string& method, const std::string& path, Handler handler) {
  routes_[path][method] = std::move(handler);
}

void Router::Dispatch(std::shared_ptr<HttpExchange> exchange) const {
  const HttpRequest& r = exchange->request();
  auto path = routes_.find(r.path);
  if (path == routes_.end()) {
    ApiError e;
    e.http_status = 404;
    e.type = "invalid_request_error";
    e.code = "not_found";
    e.message = absl::StrCat("no route ", r.method, " ", r.path);
    RespondError(*exchange, e);
    return;
  }
  auto method = path->second.find(r.method);
  if (method == path->second.end()) {
    std::vector<std::string> allowed;
    for (const auto& [m, handler] : path->second) allowed.push_back(m);
    ApiError e;
    e.http_status = 405;
    e.type = "invalid_request_error";
    e.code = "method_not_allowed";
    e.message = absl::StrCat(r.path, " accepts ", absl::StrJoin(allowed, ", "), ", not ", r.method);
    exchange->Respond(405, Dump(ErrorBody(e)), "application/json", {{"Allow", absl::StrJoin(allowed, ", ")}});
    return;
  }
  if (r.method == "POST" && !IsJsonContentType(r.content_type)) {
    ApiError e;
    e.http_status = 415;
    e.type = "invalid_request_error";
    e.code = "unsupported_media_type";
    e.message = absl::StrCat("POST ", r.path, " takes a JSON body: send Content-Type: application/json, not ",
                             r.content_type.empty() ? "none" : absl::StrCat("\"", r.content_type, "\""));
    RespondError(*exchange, e);
    return;
  }
  method->second(std::move(exchange));
}

}  // namespace tessera::http
