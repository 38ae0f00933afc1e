#ifndef TESSERA_COMMON_STRUCTURED_JSON_SCHEMA_GRAMMAR_H_
#define TESSERA_COMMON_STRUCTURED_JSON_SCHEMA_GRAMMAR_H_

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace tessera::structured {

struct JsonGrammarOptions {
  // The rule the schema's value is; every other rule is named `rule_prefix` + something,
  // so the rules can be appended to a larger grammar (a tool call's wrapper).
  std::string root_rule = "root";
  std::string rule_prefix;
  // Objects list their properties in the schema's order (required and optional alike),
  // as OpenAI's strict mode and llama.cpp do; additional properties (where allowed) come
  // after them.
};

// GBNF (see grammar.h) whose sentences are exactly the JSON texts that validate against
// `schema` (JSON Schema draft 2020-12 / draft 7 keywords), formatted with at most a little
// whitespace between tokens (a space, or a newline and up to 20 spaces/tabs of indent) so
// that a model cannot wander off into whitespace forever.
//
// Supported: type (one or a list), enum, const, object (properties, required,
// additionalProperties: false / true / a schema, minProperties/maxProperties where no
// properties are listed), array (items, prefixItems, minItems, maxItems), string
// (minLength, maxLength, pattern, format: date-time, date, time, email, uuid), integer
// and number (minimum, maximum, exclusiveMinimum, exclusiveMaximum; integer bounds for
// number), boolean, null, anyOf, oneOf (as anyOf), allOf of objects, $ref to #/$defs/...
// or #/definitions/... (recursion included), and the annotations title, description,
// default, examples, $schema, $id, $comment, which do not constrain. `true` / {} is any
// JSON value.
//
// Anything else is INVALID_ARGUMENT naming the keyword and where it is
// ("unsupported JSON Schema keyword \"patternProperties\" at /properties/tags"), never
// silently ignored. RESOURCE_EXHAUSTED when the grammar would grow past 1 MiB.
//
// Property order: nlohmann::json keeps object keys sorted, so properties come in
// alphabetical order from this overload; parse the schema into nlohmann::ordered_json
// and call the overload below to keep the schema's own order.
//
// Where `properties` is given and `additionalProperties` is absent, no other properties
// are generated (as llama.cpp and OpenAI's strict mode read it, unlike JSON Schema).
// Where additional properties are allowed, their keys are any JSON string (a key may
// repeat a listed name). Required names missing from `properties` are generated after
// the listed ones with any value. prefixItems is generated as a whole tuple. Without
// `type`, the types that the present keywords apply to are generated.
absl::StatusOr<std::string> JsonSchemaToGbnf(const nlohmann::json& schema,
                                             const JsonGrammarOptions& options = {});
absl::StatusOr<std::string> JsonSchemaToGbnf(const nlohmann::ordered_json& schema,
                                             const JsonGrammarOptions& options = {});

// GBNF for any JSON value whose outermost value is an object (OpenAI's json_object mode).
std::string JsonObjectGbnf(const JsonGrammarOptions& options = {});

}  // namespace tessera::structured

#endif  // TESSERA_COMMON_STRUCTURED_JSON_SCHEMA_GRAMMAR_H_
