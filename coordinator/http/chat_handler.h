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

// Tool calling for a parsed chat request: the model family's tool-call format (told from
// the chat template unless `serving.tool_call_format` names one), the tools into
// `options` for the template, and unless tool_choice is "none" the parsing of the output
// (`request->tool_parsing`) and, for "required" or a named function, the grammar that
// holds the output to calls (`generate.constraint.grammar`). INVALID_ARGUMENT naming
// tools when a function's parameters cannot be held to. Exposed for tests.
absl::Status PrepareToolCalling(const OpenAiServing& serving, OpenAiRequest* request, ChatRenderOptions* options);

// The rendered prompt into `request->generate` as token ids: BOS is added only when the
// template did not already write it (Llama templates start with "{{ bos_token }}"), and
// without max_tokens the rest of the context is the budget; `rendered.plain_ranges` stay
// text (--chat-special-tokens plain). Exposed for tests.
absl::Status PrepareChatPrompt(const OpenAiServing& serving, const RenderedChat& rendered, OpenAiRequest* request);
absl::Status PrepareChatPrompt(const OpenAiServing& serving, const std::string& rendered, OpenAiRequest* request);

}  // namespace tessera::http

#endif  // TESSERA_COORDINATOR_HTTP_CHAT_HANDLER_H_
