#ifndef TESSERA_COORDINATOR_HTTP_OPENAI_RESPONSE_H_
#define TESSERA_COORDINATOR_HTTP_OPENAI_RESPONSE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/http/openai_request.h"
#include "coordinator/scheduler/sequence.h"
#include "nlohmann/json.hpp"

// OpenAI's JSON shapes, built from engine results. The only place that knows them.
namespace tessera::http {

// An error as OpenAI reports it: the HTTP status and {"error": {message, type, param, code}}.
struct ApiError {
  int http_status = 500;
  std::string message;
  std::string type = "internal_error";
  std::string param;  // Empty: null.
  std::string code;   // Empty: null.
};

// The HTTP edge of absl::Status: INVALID_ARGUMENT 400, NOT_FOUND 404, RESOURCE_EXHAUSTED
// 429, UNAVAILABLE 503, UNIMPLEMENTED 501, DEADLINE_EXCEEDED 504, FAILED_PRECONDITION 400,
// anything else 500.
ApiError ToApiError(const absl::Status& status, Endpoint endpoint);
ApiError ModelNotFound(const std::string& requested);
nlohmann::json ErrorBody(const ApiError& e);
// JSON text; invalid UTF-8 (a byte-fallback token split mid-character) becomes U+FFFD
// instead of throwing.
std::string Dump(const nlohmann::json& j);

// "stop" for stop strings, stop tokens and EOS, "length" for max_tokens (and the context).
const char* FinishReasonString(sched::FinishReason reason);

// Identity shared by every response and chunk of one request.
struct ResponseMeta {
  std::string id;  // cmpl-... or chatcmpl-...
  int64_t created = 0;  // Unix seconds.
  std::string model;
};

// One generated token for logprobs: its text, its logprob, and the alternatives.
struct TokenLogprobText {
  std::string token;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;
};

// Completions' legacy logprobs object {tokens, token_logprobs, top_logprobs, text_offset};
// `text_offset` of the first token is `offset`.
nlohmann::json CompletionLogprobs(const std::vector<TokenLogprobText>& tokens, size_t offset);
// Chat's {"content": [{token, logprob, bytes, top_logprobs: [...]}]}.
nlohmann::json ChatLogprobs(const std::vector<TokenLogprobText>& tokens);

nlohmann::json Usage(int prompt_tokens, int completion_tokens);

// Non-streamed responses. `logprobs` is null when not asked for.
nlohmann::json CompletionResponse(const ResponseMeta& meta, const std::string& text, nlohmann::json logprobs,
                                  const char* finish_reason, nlohmann::json usage);
// With `tool_calls` (non-empty), the message carries them and its content is null unless
// the model wrote text before the calls.
nlohmann::json ChatCompletionResponse(const ResponseMeta& meta, const std::string& content,
                                      nlohmann::json logprobs, const char* finish_reason, nlohmann::json usage,
                                      const std::vector<ToolCall>& tool_calls = {});
// [{id, type: "function", function: {name, arguments}}].
nlohmann::json ToolCallsJson(const std::vector<ToolCall>& calls);

// Stream chunks. `finish_reason` null until the last; `include_usage` adds "usage": null
// to every chunk as OpenAI does, the usage itself coming in UsageChunk.
nlohmann::json CompletionChunk(const ResponseMeta& meta, const std::string& text, nlohmann::json logprobs,
                               const char* finish_reason, bool include_usage);
// `role` only in the first chunk of a chat stream.
nlohmann::json ChatChunk(const ResponseMeta& meta, bool with_role, const std::string* content,
                         nlohmann::json logprobs, const char* finish_reason, bool include_usage);
// The deltas that stream `calls` as OpenAI does, each a `tool_calls` list entry: per call,
// first {index, id, type, function: {name, arguments: ""}}, then {index, function:
// {arguments}} with the whole arguments text (clients concatenate the fragments).
std::vector<nlohmann::json> ToolCallDeltas(const std::vector<ToolCall>& calls);
// A chat chunk whose delta is {"tool_calls": [tool_call_delta]}.
nlohmann::json ChatToolCallChunk(const ResponseMeta& meta, nlohmann::json tool_call_delta, bool include_usage);
nlohmann::json UsageChunk(const ResponseMeta& meta, Endpoint endpoint, nlohmann::json usage);

nlohmann::json ModelList(const std::string& model, int64_t created, int max_model_len);

}  // namespace tessera::http

#endif  // TESSERA_COORDINATOR_HTTP_OPENAI_RESPONSE_H_
