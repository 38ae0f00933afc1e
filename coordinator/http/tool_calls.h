#ifndef TESSERA_COORDINATOR_HTTP_TOOL_CALLS_H_
#define TESSERA_COORDINATOR_HTTP_TOOL_CALLS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/chat_template/chat_template.h"
#include "common/tokenizer/tokenizer.h"

// How a model family writes tool calls, and reading them back out of its output (what
// vLLM's tool parsers of the same names do).
namespace tessera::http {

enum class ToolCallFormat {
  // Llama 3.1 / 3.2 (vLLM's llama3_json): {"name": "fn", "parameters": {...}}, several
  // separated by "; ". Also the fallback for templates of no known family.
  kLlama3Json,
  // Qwen2.5 and Hermes: <tool_call>\n{"name": "fn", "arguments": {...}}\n</tool_call>,
  // one block per call.
  kHermes,
  // Mistral: [TOOL_CALLS] [{"name": "fn", "arguments": {...}}, ...].
  kMistral,
};

// The family's format, told from its chat template: "[TOOL_CALLS]" is Mistral's,
// "<tool_call>" Qwen2.5's and Hermes', anything else (Llama 3.1's "Environment: ipython"
// and JSON calls included) gets kLlama3Json.
ToolCallFormat DetectToolCallFormat(absl::string_view chat_template_source);
// vLLM's parser names: "llama3_json", "hermes", "mistral" (an override of the detection).
absl::StatusOr<ToolCallFormat> ToolCallFormatFromName(absl::string_view name);
const char* ToolCallFormatName(ToolCallFormat format);
// The text that opens a call ("<tool_call>", "[TOOL_CALLS]"; Llama 3.1's JSON has none).
absl::string_view ToolCallMarker(ToolCallFormat format);

struct ToolCall {
  std::string id;         // call_<24 alphanumerics>; Mistral's 9 alphanumerics (its template demands).
  std::string name;
  std::string arguments;  // JSON text of an object, as OpenAI sends it.
};

struct ParsedToolCalls {
  std::string content;  // The text before the calls (Hermes, Mistral); empty for none.
  std::vector<ToolCall> calls;  // At least one.
};

// The tool calls `text` (a whole output) holds in `format`; nullopt when it holds none
// that parse, and then the output is plain content. `forced`: a grammar held the output
// to calls (tool_choice "required" or a named function), so Mistral's marker, which a
// grammar cannot make the model emit as its special token, is optional.
std::optional<ParsedToolCalls> ParseToolCalls(ToolCallFormat format, absl::string_view text, bool forced);

std::string NewToolCallId(ToolCallFormat format);

// What the chat handler tells the generation about parsing its output.
struct ToolCallParsing {
  ToolCallFormat format = ToolCallFormat::kLlama3Json;
  bool forced = false;
  // The id of the marker token when the tokenizer has it as a special token: decoding
  // skips special tokens, so the marker is put back into the text where this id is
  // generated (vLLM turns skip_special_tokens off for the same reason). -1: none.
  int32_t marker_token_id = -1;
};

// The marker's special-token id in `tokenizer`, or -1 when it is none or not special.
int32_t SpecialMarkerId(ToolCallFormat format, const Tokenizer& tokenizer);

// Mistral's template refuses tool-call ids that are not 9 characters; longer ones (OpenAI's
// call_...) are cut to their last 9, as vLLM does for Mistral models. Other formats: as is.
void AdaptToolCallIds(ToolCallFormat format, std::vector<ChatMessage>* messages);

}  // namespace tessera::http

#endif  // TESSERA_COORDINATOR_HTTP_TOOL_CALLS_H_
