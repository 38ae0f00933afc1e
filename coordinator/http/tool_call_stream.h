#ifndef TESSERA_COORDINATOR_HTTP_TOOL_CALL_STREAM_H_
#define TESSERA_COORDINATOR_HTTP_TOOL_CALL_STREAM_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "coordinator/http/tool_calls.h"

namespace tessera::http {

// A streamed output that may turn into tool calls. Text that cannot be part of a call
// streams on as content; from where a call may begin (the family's marker, or for Llama
// 3.1's JSON a first character "{") the text is held, and at the end it is parsed: calls
// if it parses, else it goes out as content after all. Holding until the end is what
// vLLM's parsers amount to for a client, which sees a call only once it is whole.
class ToolCallStream {
 public:
  explicit ToolCallStream(const ToolCallParsing& parsing) : parsing_(parsing) {}

  // The next piece of output; returns what can go to the client now as content.
  std::string Push(absl::string_view text);

  struct End {
    std::string content;          // Held text that is content after all (or before the calls).
    std::vector<ToolCall> calls;  // Empty: no calls.
  };
  // The output ended.
  End Finish();

 private:
  enum class State { kStart, kContent, kHolding };
  ToolCallParsing parsing_;
  State state_ = State::kStart;
  std::string held_;
};

}  // namespace tessera::http

#endif  // TESSERA_COORDINATOR_HTTP_TOOL_CALL_STREAM_H_
