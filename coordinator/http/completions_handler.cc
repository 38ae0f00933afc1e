#include "coordinator/http/completions_handler.h"

#include <utility>

#include "coordinator/http/generation_call.h"
#include "coordinator/http/openai_request.h"
#include "coordinator/http/openai_response.h"
#include "coordinator/metrics/engine_metrics.h"

namespace tessera::http {

bool CheckModel(HttpExchange& exchange, const OpenAiServing& serving, const std::string& model) {
  if (model.empty() || model == serving.served_model) return true;
  if (EngineMetrics* m = serving.admission->engine()->metrics(); m != nullptr) {
    m->RequestRejected("model_not_found", "http");
  }
  RespondError(exchange, ModelNotFound(model));
  return false;
}

void HandleCompletions(std::shared_ptr<HttpExchange> exchange, const OpenAiServing* serving) {
  auto request = ParseOpenAiRequest(exchange->request().body, Endpoint::kCompletions,
                                    serving->admission->limits().max_logprobs);
  if (!request.ok()) {
    if (EngineMetrics* m = serving->admission->engine()->metrics(); m != nullptr) {
      m->RequestRejected("invalid_argument", "http");
    }
    RespondError(*exchange, ToApiError(request.status(), Endpoint::kCompletions));
    return;
  }
  if (!CheckModel(*exchange, *serving, request->model)) return;
  RunGeneration(std::move(exchange), serving, *std::move(request));
}

}  // namespace tessera::http
