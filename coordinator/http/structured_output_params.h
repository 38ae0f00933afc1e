#ifndef TESSERA_COORDINATOR_HTTP_STRUCTURED_OUTPUT_PARAMS_H_
#define TESSERA_COORDINATOR_HTTP_STRUCTURED_OUTPUT_PARAMS_H_

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "tessera/v1/generation.pb.h"

namespace tessera::http {

// Structured outputs of a completions or chat body into `constraint` (left unset when the
// body asks for none):
//   OpenAI's response_format: {"type": "text"} (none), {"type": "json_object"}, or
//     {"type": "json_schema", "json_schema": {"name", "schema", "strict", "description"}};
//   vLLM's guided_json (a schema as an object or JSON text), guided_regex, guided_choice
//     (strings), guided_grammar (GBNF), and its newer structured_outputs: {json, regex,
//     choice, grammar, json_object}.
// The values themselves (schema features, regex syntax, grammar) are checked where the
// constraint is compiled; this checks shapes and types. INVALID_ARGUMENT naming the param
// for a wrong type, a missing schema, or more than one constraint at once.
// `body` is the order-keeping parse, so a schema's properties keep the client's order.
absl::Status ParseStructuredOutputs(const nlohmann::ordered_json& body, v1::Constraint* constraint);

}  // namespace tessera::http

#endif  // TESSERA_COORDINATOR_HTTP_STRUCTURED_OUTPUT_PARAMS_H_
