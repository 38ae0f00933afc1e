#ifndef TESSERA_COORDINATOR_HTTP_TOOL_REQUEST_H_
#define TESSERA_COORDINATOR_HTTP_TOOL_REQUEST_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/chat_template/chat_template.h"
#include "nlohmann/json.hpp"

// The tool-calling part of a chat request (OpenAI's tools, tool_choice,
// parallel_tool_calls, and the tool fields of messages), checked for shape and types.
namespace tessera::http {

// One function the client offers.
struct ToolFunction {
  std::string name;
  nlohmann::ordered_json parameters;  // Its JSON Schema; null when the function takes none.
};

enum class ToolChoice {
  kNone,      // No tools, or tool_choice "none": the output is never parsed for calls.
  kAuto,      // The model may call: its output is parsed, and is content if it is no call.
  kRequired,  // At least one call of any of the tools (a grammar makes sure).
  kNamed,     // Exactly one call of `named` (a grammar makes sure).
};

struct ToolRequest {
  // As the client sent them, for the chat template's `tools`; null without tools. With
  // tool_choice "none" they are still rendered, as vLLM does.
  nlohmann::ordered_json tools = nullptr;
  std::vector<ToolFunction> functions;
  ToolChoice choice = ToolChoice::kNone;
  std::string named;            // kNamed: the function.
  bool parallel_tool_calls = true;  // kRequired: more than one call allowed.
};

// tools, tool_choice and parallel_tool_calls of `body` (the order-keeping parse: tools
// reach the template, and key order reaches its tojson). INVALID_ARGUMENT naming the
// param for a wrong type, a function without a valid name (OpenAI's [a-zA-Z0-9_-]{1,64};
// dots too, which some clients use), two functions of one name, a tool_choice naming no
// offered function, or a tool_choice other than "none" without tools.
absl::Status ParseToolRequest(const nlohmann::ordered_json& body, ToolRequest* out);

// The fields of messages[`index`] past role and content that the chat template sees:
// an assistant's tool_calls ([{id, type, function: {name, arguments}}], arguments parsed
// from their JSON text to the value, as vLLM and Hugging Face templates expect;
// null or "" is {}), a tool result's tool_call_id, and any message's name.
absl::Status ParseMessageToolFields(const nlohmann::ordered_json& message, size_t index, ChatMessage* out);

}  // namespace tessera::http

#endif  // TESSERA_COORDINATOR_HTTP_TOOL_REQUEST_H_
