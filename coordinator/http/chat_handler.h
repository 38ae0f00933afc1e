#ifndef TESSERA_COORDINATOR_HTTP_CHAT_HANDLER_H_
#define TESSERA_COORDINATOR_HTTP_CHAT_HANDLER_H_

#include <memory>

#include <string>

#include "absl/status/status.h"
#include "coordinator/api/chat_prompt.h"
#include "coordinator/http/http_exchange.h"
#include "coordinator/http/openai_request.h"
#include "coordinator/http/openai_serving.h"

namespace tessera::http {

// POST /v1/chat/completions: renders `messages` with the model's chat template, then runs
// like a completion of the rendered prompt.
void HandleChatCompletions(std::shared_ptr<HttpExchange> exchange, const OpenAiServing* serving);

// The rendered prompt into `request->generate` as token ids: BOS is added only when the
// template did not already write it (Llama templates start with "{{ bos_token }}"), and
// without max_tokens the rest of the context is the budget; `rendered.plain_ranges` stay
// text (--chat-special-tokens plain). Exposed for tests.
absl::Status PrepareChatPrompt(const OpenAiServing& serving, const RenderedChat& rendered, OpenAiRequest* request);
absl::Status PrepareChatPrompt(const OpenAiServing& serving, const std::string& rendered, OpenAiRequest* request);

}  // namespace tessera::http

#endif  // TESSERA_COORDINATOR_HTTP_CHAT_HANDLER_H_
