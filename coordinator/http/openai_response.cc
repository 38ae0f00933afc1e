#include "coordinator/http/openai_response.h"

#include "absl/strings/str_cat.h"

namespace tessera::http {

using json = nlohmann::json;

namespace {

json NullIfEmpty(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

json Bytes(const std::string& s) {
  json out = json::array();
  for (unsigned char c : s) out.push_back(static_cast<int>(c));
  return out;
}

}  // namespace

ApiError ToApiError(const absl::Status& status, Endpoint endpoint) {
  ApiError e;
  e.message = OpenAiMessage(status, endpoint);
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      e.http_status = 400;
      e.type = "invalid_request_error";
      e.param = ParamOf(status, endpoint);
      break;
    case absl::StatusCode::kNotFound:
      e.http_status = 404;
      e.type = "invalid_request_error";
      break;
    case absl::StatusCode::kResourceExhausted:
      // The admission queue is full, too many streams, or the client stopped reading.
      e.http_status = 429;
      e.type = "rate_limit_error";
      e.code = "rate_limit_exceeded";
      break;
    case absl::StatusCode::kUnavailable:
      e.http_status = 503;
      e.type = "service_unavailable";
      break;
    case absl::StatusCode::kUnimplemented:
      e.http_status = 501;
      e.type = "not_implemented";
      break;
    case absl::StatusCode::kDeadlineExceeded:
      e.http_status = 504;
      e.type = "timeout";
      break;
    default:
      e.http_status = 500;
      e.type = "internal_error";
      break;
  }
  return e;
}

ApiError ModelNotFound(const std::string& requested) {
  ApiError e;
  e.http_status = 404;
  e.type = "invalid_request_error";
  e.param = "model";
  e.code = "model_not_found";
  e.message = absl::StrCat("The model `", requested, "` does not exist.");
  return e;
}

json ErrorBody(const ApiError& e) {
  return {{"error",
           {{"message", e.message}, {"type", e.type}, {"param", NullIfEmpty(e.param)}, {"code", NullIfEmpty(e.code)}}}};
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

const char* FinishReasonString(sched::FinishReason reason) {
  switch (reason) {
    case sched::FinishReason::kStop:
    case sched::FinishReason::kEos:
      return "stop";
    case sched::FinishReason::kLength:
      return "length";
    case sched::FinishReason::kCancelled:
    case sched::FinishReason::kError:
      break;
  }
  return "abort";
}

json CompletionLogprobs(const std::vector<TokenLogprobText>& tokens, size_t offset) {
  json out = {{"tokens", json::array()},
              {"token_logprobs", json::array()},
              {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
  for (const TokenLogprobText& t : tokens) {
    out["tokens"].push_back(t.token);
    out["token_logprobs"].push_back(t.logprob);
    json top = json::object();
    for (const auto& [text, lp] : t.top) {
      // Two ids can decode to the same text; keep the likelier (listed first).
      if (!top.contains(text)) top[text] = lp;
    }
    out["top_logprobs"].push_back(std::move(top));
    out["text_offset"].push_back(offset);
    offset += t.token.size();
  }
  return out;
}

json ChatLogprobs(const std::vector<TokenLogprobText>& tokens) {
  json content = json::array();
  for (const TokenLogprobText& t : tokens) {
    json top = json::array();
    for (const auto& [text, lp] : t.top) {
      top.push_back({{"token", text}, {"logprob", lp}, {"bytes", Bytes(text)}});
    }
    content.push_back({{"token", t.token}, {"logprob", t.logprob}, {"bytes", Bytes(t.token)}, {"top_logprobs", top}});
  }
  return {{"content", std::move(content)}};
}

json Usage(int prompt_tokens, int completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

json CompletionResponse(const ResponseMeta& meta, const std::string& text, json logprobs, const char* finish_reason,
                        json usage) {
  return {{"id", meta.id},
          {"object", "text_completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices",
           json::array({{{"index", 0}, {"text", text}, {"logprobs", std::move(logprobs)}, {"finish_reason", finish_reason}}})},
          {"usage", std::move(usage)}};
}

json ToolCallsJson(const std::vector<ToolCall>& calls) {
  json out = json::array();
  for (const ToolCall& c : calls) {
    out.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  return out;
}

json ChatCompletionResponse(const ResponseMeta& meta, const std::string& content, json logprobs,
                            const char* finish_reason, json usage, const std::vector<ToolCall>& tool_calls) {
  json message = {{"role", "assistant"}, {"content", content}};
  if (!tool_calls.empty()) {
    message["content"] = NullIfEmpty(content);
    message["tool_calls"] = ToolCallsJson(tool_calls);
  }
  return {{"id", meta.id},
          {"object", "chat.completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", json::array({{{"index", 0},
                                    {"message", std::move(message)},
                                    {"logprobs", std::move(logprobs)},
                                    {"finish_reason", finish_reason}}})},
          {"usage", std::move(usage)}};
}

json CompletionChunk(const ResponseMeta& meta, const std::string& text, json logprobs, const char* finish_reason,
                     bool include_usage) {
  json chunk = {{"id", meta.id},
                {"object", "text_completion"},
                {"created", meta.created},
                {"model", meta.model},
                {"choices", json::array({{{"index", 0},
                                          {"text", text},
                                          {"logprobs", std::move(logprobs)},
                                          {"finish_reason", finish_reason == nullptr ? json(nullptr) : json(finish_reason)}}})}};
  if (include_usage) chunk["usage"] = nullptr;
  return chunk;
}

json ChatChunk(const ResponseMeta& meta, bool with_role, const std::string* content, json logprobs,
               const char* finish_reason, bool include_usage) {
  json delta = json::object();
  if (with_role) delta["role"] = "assistant";
  if (content != nullptr) delta["content"] = *content;
  json chunk = {{"id", meta.id},
                {"object", "chat.completion.chunk"},
                {"created", meta.created},
                {"model", meta.model},
                {"choices", json::array({{{"index", 0},
                                          {"delta", std::move(delta)},
                                          {"logprobs", std::move(logprobs)},
                                          {"finish_reason", finish_reason == nullptr ? json(nullptr) : json(finish_reason)}}})}};
  if (include_usage) chunk["usage"] = nullptr;
  return chunk;
}

std::vector<json> ToolCallDeltas(const std::vector<ToolCall>& calls) {
  std::vector<json> out;
  for (size_t i = 0; i < calls.size(); ++i) {
    out.push_back({{"index", i},
                   {"id", calls[i].id},
                   {"type", "function"},
                   {"function", {{"name", calls[i].name}, {"arguments", ""}}}});
    out.push_back({{"index", i}, {"function", {{"arguments", calls[i].arguments}}}});
  }
  return out;
}

json ChatToolCallChunk(const ResponseMeta& meta, json tool_call_delta, bool include_usage) {
  json chunk = {{"id", meta.id},
                {"object", "chat.completion.chunk"},
                {"created", meta.created},
                {"model", meta.model},
                {"choices", json::array({{{"index", 0},
                                          {"delta", {{"tool_calls", json::array({std::move(tool_call_delta)})}}},
                                          {"logprobs", nullptr},
                                          {"finish_reason", nullptr}}})}};
  if (include_usage) chunk["usage"] = nullptr;
  return chunk;
}

json UsageChunk(const ResponseMeta& meta, Endpoint endpoint, json usage) {
  return {{"id", meta.id},
          {"object", endpoint == Endpoint::kChatCompletions ? "chat.completion.chunk" : "text_completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", json::array()},
          {"usage", std::move(usage)}};
}

json ModelList(const std::string& model, int64_t created, int max_model_len) {
  return {{"object", "list"},
          {"data", json::array({{{"id", model},
                                 {"object", "model"},
                                 {"created", created},
                                 {"owned_by", "tessera"},
                                 {"root", model},
                                 {"max_model_len", max_model_len}}})}};
}

}  // namespace tessera::http
