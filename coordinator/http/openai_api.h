#ifndef TESSERA_COORDINATOR_HTTP_OPENAI_API_H_
#define TESSERA_COORDINATOR_HTTP_OPENAI_API_H_

#include <filesystem>
#include <memory>

#include "absl/status/statusor.h"
#include "common/chat_template/chat_template.h"
#include "coordinator/http/openai_serving.h"
#include "coordinator/http/router.h"

namespace tessera::http {

// The OpenAI-compatible routes: POST /v1/completions, POST /v1/chat/completions,
// GET /v1/models, GET /health. `serving` must outlive the router.
std::unique_ptr<Router> MakeOpenAiRouter(const OpenAiServing* serving);

}  // namespace tessera::http

#endif  // TESSERA_COORDINATOR_HTTP_OPENAI_API_H_
