#ifndef TESSERA_COORDINATOR_HTTP_TOOL_CALL_GRAMMAR_H_
#define TESSERA_COORDINATOR_HTTP_TOOL_CALL_GRAMMAR_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/http/tool_calls.h"
#include "coordinator/http/tool_request.h"

namespace tessera::http {

// GBNF (common/structured/grammar.h) whose sentences are tool calls in `format` of the
// `functions`, each call's arguments valid against that function's `parameters` schema
// (common/structured/json_schema_grammar.h; a function without parameters takes any
// object): what tool_choice "required" (all offered functions) and a named function (that
// one) hold the output to, so that ParseToolCalls(format, output, /*forced=*/true) always
// finds the calls. `parallel`: one or more calls; else exactly one.
//
//   kLlama3Json  {"name": "fn", "parameters": ARGS} joined by "; "
//   kHermes      <tool_call>\n{"name": "fn", "arguments": ARGS}\n</tool_call> joined by "\n"
//   kMistral     [TOOL_CALLS] [{"name": "fn", "arguments": ARGS}, ...] (the marker optional:
//                where it is a special token, constrained decoding cannot emit it)
//// The single spaces shown are optional, so that a vocabulary in which a space cannot
// stand alone (SentencePiece's "▁" pieces decode without it at the start) can still
// write the call; the parsers take either.
//
// INVALID_ARGUMENT naming tools[i].function.parameters when a schema cannot be held to.
absl::StatusOr<std::string> ToolCallGrammar(ToolCallFormat format, const std::vector<ToolFunction>& functions,
                                            const std::vector<size_t>& tool_indices, bool parallel);

// The grammar a ToolRequest asks for: kRequired over every function (parallel as
// parallel_tool_calls says), kNamed over the named one alone. Only for those two choices.
absl::StatusOr<std::string> ToolChoiceGrammar(ToolCallFormat format, const ToolRequest& tools);

}  // namespace tessera::http

#endif  // TESSERA_COORDINATOR_HTTP_TOOL_CALL_GRAMMAR_H_
