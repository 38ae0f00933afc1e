#ifndef TESSERA_COORDINATOR_HTTP_COMPLETIONS_HANDLER_H_
#define TESSERA_COORDINATOR_HTTP_COMPLETIONS_HANDLER_H_

#include <memory>

#include "coordinator/http/http_exchange.h"
#include "coordinator/http/openai_serving.h"

namespace tessera::http {

// POST /v1/completions.
void HandleCompletions(std::shared_ptr<HttpExchange> exchange, const OpenAiServing* serving);

// The "model" check shared by both generation endpoints: empty (not given) or the served
// name; false (and the 404 sent) otherwise.
bool CheckModel(HttpExchange& exchange, const OpenAiServing& serving, const std::string& model);

}  // namespace tessera::http

#endif  // TESSERA_COORDINATOR_HTTP_COMPLETIONS_HANDLER_H_
