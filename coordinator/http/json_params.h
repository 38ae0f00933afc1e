#ifndef TESSERA_COORDINATOR_HTTP_JSON_PARAMS_H_
#define TESSERA_COORDINATOR_HTTP_JSON_PARAMS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "coordinator/http/openai_request.h"
#include "nlohmann/json.hpp"

// Reading request-body fields with the OpenAI layer's error conventions (INVALID_ARGUMENT
// naming the param). Templates over nlohmann::json and ordered_json: the fields whose key
// order reaches the model (JSON schemas, tools) are read from an order-keeping parse.
namespace tessera::http {

// A field that is absent or null is "not given" (clients send null for unset options).
template <typename Json>
const Json* Field(const Json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

template <typename Json>
absl::Status TypeError(absl::string_view param, absl::string_view expected, const Json& value) {
  return InvalidParam(param, absl::StrCat(param, " must be ", expected, ", got ", value.type_name(), " ",
                                          value.dump(-1, ' ', false, Json::error_handler_t::replace)));
}

// `text` parsed keeping every object's key order. Order costs a linear search per key
// (nlohmann's ordered_map), so a body whose objects are too wide for that is refused
// (INVALID_ARGUMENT for `param`) instead of parsed in quadratic time; so are malformed
// JSON and nesting past kMaxJsonDepth.
absl::StatusOr<nlohmann::ordered_json> ParseOrderedJson(absl::string_view text, absl::string_view param);

}  // namespace tessera::http

#endif  // TESSERA_COORDINATOR_HTTP_JSON_PARAMS_H_
