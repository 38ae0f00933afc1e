#include "coordinator/http/chat_handler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "coordinator/api/request_validation.h"
#include "coordinator/http/completions_handler.h"
#include "coordinator/http/generation_call.h"
#include "coordinator/http/openai_response.h"
#include "coordinator/http/tool_call_grammar.h"
#include "coordinator/http/tool_calls.h"
#include "coordinator/metrics/engine_metrics.h"

namespace tessera::http {
namespace {

void Reject(HttpExchange& exchange, const OpenAiServing& serving, const ApiError& error, const char* reason) {
  if (EngineMetrics* m = serving.admission->engine()->metrics(); m != nullptr) m->RequestRejected(reason, "http");
  RespondError(exchange, error);
}

// Why this server cannot render chat for its model.
ApiError NoTemplate(const OpenAiServing& serving) {
  ApiError e;
  const absl::Status& s = serving.chat_template_status;
  if (absl::IsNotFound(s) || s.ok()) {
    e.http_status = 400;
    e.type = "invalid_request_error";
    e.param = "messages";
    e.message = absl::StrCat("the model `", serving.served_model,
                             "` has no chat template (no chat_template.jinja, no chat_template in "
                             "tokenizer_config.json), so it cannot take messages; use /v1/completions");
  } else {
    e.http_status = 500;
    e.message = absl::StrCat("the model's chat template failed to load: ", s.message());
  }
  return e;
}

}  // namespace

absl::Status PrepareToolCalling(const OpenAiServing& serving, OpenAiRequest* request, ChatRenderOptions* options) {
  ToolCallFormat format = DetectToolCallFormat(serving.chat_template->source());
  if (!serving.tool_call_format.empty()) {
    absl::StatusOr<ToolCallFormat> named = ToolCallFormatFromName(serving.tool_call_format);
    if (!named.ok()) return named.status();
    format = *named;
  }
  // Tool calls in the history are the family's to render, with or without tools now.
  AdaptToolCallIds(format, &request->messages);
  const ToolRequest& tools = request->tools;
  if (tools.tools.is_null()) return absl::OkStatus();
  // Rendered even under tool_choice "none", as vLLM does: the model knows of them and is
  // not asked to call.
  options->tools = tools.tools;
  if (tools.choice == ToolChoice::kNone) return absl::OkStatus();
  ToolCallParsing parsing;
  parsing.format = format;
  parsing.forced = tools.choice == ToolChoice::kRequired || tools.choice == ToolChoice::kNamed;
  parsing.marker_token_id = SpecialMarkerId(format, *serving.tokenizer);
  if (parsing.forced) {
    absl::StatusOr<std::string> grammar = ToolChoiceGrammar(format, tools);
    if (!grammar.ok()) return grammar.status();
    request->generate.mutable_constraint()->set_grammar(*std::move(grammar));
  }
  request->tool_parsing = parsing;
  return absl::OkStatus();
}

absl::Status PrepareChatPrompt(const OpenAiServing& serving, const std::string& rendered, OpenAiRequest* request) {
  return PrepareChatPrompt(serving, RenderedChat{rendered, {}}, request);
}

absl::Status PrepareChatPrompt(const OpenAiServing& serving, const RenderedChat& chat, OpenAiRequest* request) {
  const std::string& rendered = chat.text;
  const ServingLimits& limits = serving.admission->limits();
  if (absl::Status s = CheckInputSize("messages", rendered.size(), limits); !s.ok()) {
    return InvalidParam("messages", absl::StrCat("the rendered chat prompt has ", rendered.size(),
                                                 " bytes; at most ", limits.max_input_bytes, " (--max-input-bytes)"));
  }
  const Tokenizer& tok = *serving.tokenizer;
  const int32_t bos = tok.bos_id();
  const std::string bos_text = bos >= 0 ? tok.PieceForId(bos) : std::string();
  // A BOS spelled by a message that stays plain is not the template's.
  const bool has_bos = !bos_text.empty() && absl::StartsWith(rendered, bos_text) &&
                       (chat.plain_ranges.empty() || chat.plain_ranges.front().begin > 0);
  Tokenizer::EncodeOptions encode;
  encode.add_special_tokens = !has_bos;
  encode.plain_ranges = chat.plain_ranges;
  const std::vector<int32_t> ids = tok.Encode(rendered, encode);
  if (ids.empty()) return InvalidParam("messages", "the rendered chat prompt is empty");
  v1::GenerateRequest& g = request->generate;
  g.clear_text();
  g.mutable_token_ids()->mutable_ids()->Assign(ids.begin(), ids.end());
  // Chat has no small default like completions' 16: answer until EOS or the context ends.
  if (!request->max_tokens_set) {
    g.mutable_stopping()->set_max_new_tokens(
        static_cast<uint32_t>(std::max(1, limits.max_context - static_cast<int>(ids.size()))));
  }
  return absl::OkStatus();
}

void HandleChatCompletions(std::shared_ptr<HttpExchange> exchange, const OpenAiServing* serving) {
  auto request = ParseOpenAiRequest(exchange->request().body, Endpoint::kChatCompletions,
                                    serving->admission->limits().max_logprobs);
  if (!request.ok()) {
    Reject(*exchange, *serving, ToApiError(request.status(), Endpoint::kChatCompletions), "invalid_argument");
    return;
  }
  if (!CheckModel(*exchange, *serving, request->model)) return;
  if (serving->chat_template == nullptr) {
    Reject(*exchange, *serving, NoTemplate(*serving), "no_chat_template");
    return;
  }
  // The messages are held against --max-inflight-input-bytes while they are rendered and
  // tokenized; what is over --max-input-bytes is refused below, naming that limit.
  const ServingLimits& limits = serving->admission->limits();
  InputBudget::Lease lease;
  if (limits.input_budget != nullptr) {
    int64_t bytes = 0;
    for (const ChatMessage& m : request->messages) bytes += static_cast<int64_t>(m.role.size() + m.content.size());
    if (bytes <= limits.max_input_bytes) {
      auto acquired = limits.input_budget->Acquire(bytes, "the messages");
      if (!acquired.ok()) {
        Reject(*exchange, *serving, ToApiError(acquired.status(), Endpoint::kChatCompletions), "input_budget");
        return;
      }
      lease = *std::move(acquired);
    }
  }
  ChatRenderOptions options;
  options.add_generation_prompt = true;
  if (absl::Status s = PrepareToolCalling(*serving, &*request, &options); !s.ok()) {
    Reject(*exchange, *serving, ToApiError(s, Endpoint::kChatCompletions), "invalid_argument");
    return;
  }
  auto rendered = RenderChat(request->messages, options, *serving->chat_template, *serving->tokenizer,
                             limits.chat_plain_special_tokens);
  if (!rendered.ok()) {
    Reject(*exchange, *serving,
           ToApiError(InvalidParam("messages", absl::StrCat("the chat template refused the messages: ",
                                                            rendered.status().message())),
                      Endpoint::kChatCompletions),
           "invalid_argument");
    return;
  }
  if (absl::Status s = PrepareChatPrompt(*serving, *rendered, &*request); !s.ok()) {
    Reject(*exchange, *serving, ToApiError(s, Endpoint::kChatCompletions), "invalid_argument");
    return;
  }
  lease.Release();
  RunGeneration(std::move(exchange), serving, *std::move(request));
}

}  // namespace tessera::http
