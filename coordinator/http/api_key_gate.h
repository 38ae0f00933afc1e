#ifndef TESSERA_COORDINATOR_HTTP_API_KEY_GATE_H_
#define TESSERA_COORDINATOR_HTTP_API_KEY_GATE_H_

#include <memory>

#include "common/auth/api_keys.h"
#include "coordinator/http/http_exchange.h"
#include "coordinator/metrics/engine_metrics.h"

namespace tessera::http {

// Whether the exchange may proceed. Without keys (null) everything may; GET /health is
// always open (load balancers probe it without credentials). Otherwise a missing or wrong
// `Authorization: Bearer <key>` is answered 401 in OpenAI's shape (code
// "invalid_api_key"), counted as rejected ("unauthenticated") and logged without the key.
bool Authorize(const auth::ApiKeyStore* keys, EngineMetrics* metrics, HttpExchange& exchange);

}  // namespace tessera::http

#endif  // TESSERA_COORDINATOR_HTTP_API_KEY_GATE_H_
