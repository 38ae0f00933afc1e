#include "coordinator/http/openai_api.h"

#include <utility>

#include "coordinator/http/chat_handler.h"
#include "coordinator/http/completions_handler.h"
#include "coordinator/http/generation_call.h"
#include "coordinator/http/openai_response.h"

namespace tessera::http {

std::unique_ptr<Router> MakeOpenAiRouter(const OpenAiServing* serving) {
  auto router = std::make_unique<Router>();
  router->Add("POST", "/v1/completions",
              [serving](std::shared_ptr<HttpExchange> ex) { HandleCompletions(std::move(ex), serving); });
  router->Add("POST", "/v1/chat/completions",
              [serving](std::shared_ptr<HttpExchange> ex) { HandleChatCompletions(std::move(ex), serving); });
  router->Add("GET", "/v1/models", [serving](std::shared_ptr<HttpExchange> ex) {
    ex->Respond(200, Dump(ModelList(serving->served_model, serving->created,
                                    serving->admission->limits().max_context)));
  });
  router->Add("GET", "/health", [serving](std::shared_ptr<HttpExchange> ex) {
    if (serving->ready && serving->ready()) {
      ex->Respond(200, "{}");
      return;
    }
    ApiError e;
    e.http_status = 503;
    e.type = "service_unavailable";
    e.message = "no model replica is ready (workers loading or gone), or the server is draining";
    RespondError(*ex, e);
  });
  return router;
}

}  // namespace tessera::http
