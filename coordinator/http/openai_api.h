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

// The model folder's chat template; UNIMPLEMENTED when this build has no chat-template
// library (the tessera_chat_template target), NOT_FOUND when the model has none.
absl::StatusOr<std::unique_ptr<ChatTemplate>> LoadChatTemplate(const std::filesystem::path& model_dir);

}  // namespace tessera::http

#endif  // TESSERA_COORDINATOR_HTTP_OPENAI_API_H_
