#include "coordinator/http/api_key_gate.h"

#include <string>

#include "common/logging.h"
#include "coordinator/http/openai_response.h"

namespace tessera::http {

bool Authorize(const auth::ApiKeyStore* keys, EngineMetrics* metrics, HttpExchange& exchange) {
  if (keys == nullptr) return true;
  const HttpRequest& r = exchange.request();
  if (r.path == "/health" && r.method == "GET") return true;
  const absl::Status checked = keys->Check(r.authorization);
  if (checked.ok()) return true;
  if (metrics != nullptr) metrics->RequestRejected("unauthenticated", "http");
  Log(LogLevel::kWarning, "tessera-coordinator", "unauthenticated request refused",
      {{"method", r.method}, {"path", r.path}, {"reason", std::string(checked.message())}});
  ApiError e;
  e.http_status = 401;
  e.type = "invalid_request_error";
  e.code = "invalid_api_key";
  e.message = std::string(checked.message());
  exchange.Respond(401, Dump(ErrorBody(e)), "application/json", {{"WWW-Authenticate", "Bearer"}});
  return false;
}

}  // namespace tessera::http
