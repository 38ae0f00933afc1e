#ifndef TESSERA_COORDINATOR_HTTP_OPENAI_REQUEST_H_
#define TESSERA_COORDINATOR_HTTP_OPENAI_REQUEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/chat_template/chat_template.h"
#include "coordinator/http/tool_calls.h"
#include "coordinator/http/tool_request.h"
#include "tessera/v1/generation.pb.h"

namespace tessera::http {

enum class Endpoint { kCompletions, kChatCompletions };

// An OpenAI /v1/completions or /v1/chat/completions body, checked for shape and types and
// translated to the gRPC API's request, so that the values themselves go through the
// same validation (coordinator/api/request_validation.h) as a gRPC call's.
struct OpenAiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;  // Empty: the client did not name one (the served model is used).
  // Completions: the prompt, as text or token ids (in `generate`). Chat: the messages,
  // rendered by the chat handler.
  std::vector<ChatMessage> messages;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage.
  // Logprobs were asked for (completions: "logprobs" present, an integer; chat:
  // "logprobs": true), and how many alternatives per token.
  bool logprobs = false;
  int top_logprobs = 0;
  bool max_tokens_set = false;
  // Chat: tools offered and how they may be called.
  ToolRequest tools;
  // Set by the chat handler when the output is to be parsed for tool calls (tools given,
  // tool_choice not "none"): in the model family's format.
  std::optional<ToolCallParsing> tool_parsing;
  // Everything that maps onto tessera.v1: input (completions), sampling, stopping,
  // logprobs (at least 1 when `logprobs`, since the engine reports the sampled token's
  // logprob only alongside a top-n), priority, and the structured-output constraint
  // (response_format, guided_*, structured_outputs; a forced tool call's grammar).
  v1::GenerateRequest generate;
};

// The payload key under which a status names the offending request field ("param" of an
// OpenAI error).
inline constexpr absl::string_view kParamPayload = "tessera.dev/openai-param";

// INVALID_ARGUMENT for `param`, with the param attached as payload.
absl::Status InvalidParam(absl::string_view param, absl::string_view message);
// The param a status names: its payload, else the field a request_validation message
// starts with ("sampling.top_p = 2: ..."), translated to the OpenAI name.
std::string ParamOf(const absl::Status& status, Endpoint endpoint);
// A request_validation message with its leading field renamed to the OpenAI name.
std::string OpenAiMessage(const absl::Status& status, Endpoint endpoint);

// Limits on a request body's JSON, checked before it is parsed into a DOM (whose size
// grows with the number of values and, for nested ones, the depth): INVALID_ARGUMENT
// (HTTP 400) naming the limit beyond them. 2^21 values leave room for a prompt of token
// ids as long as any served context.
inline constexpr int kMaxJsonDepth = 128;
inline constexpr size_t kMaxJsonValues = size_t{1} << 21;
absl::Status CheckJsonShape(absl::string_view body);

// Parses `body` (JSON). INVALID_ARGUMENT (with the param payload) for malformed JSON, a
// wrong type, a missing required field, conflicting constraints, or a feature Tessera
// does not serve (n > 1, a batch of prompts, echo, best_of > 1, tools on completions).
absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(absl::string_view body, Endpoint endpoint,
                                                 int max_logprobs);

}  // namespace tessera::http

#endif  // TESSERA_COORDINATOR_HTTP_OPENAI_REQUEST_H_
