#include "coordinator/http/structured_output_params.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/http/json_params.h"
#include "coordinator/http/openai_request.h"

namespace tessera::http {
namespace {

using json = nlohmann::ordered_json;

// One constraint a body asks for, and the param that asked.
struct Asked {
  explicit Asked(std::string p) : param(std::move(p)) {}
  std::string param;
  v1::Constraint constraint;
};

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// A JSON Schema given as an object (or a boolean schema), or as JSON text (vLLM's
// guided_json accepts both).
absl::Status Schema(const json& value, const std::string& param, bool text_allowed, v1::Constraint* out) {
  if (value.is_object() || value.is_boolean()) {
    out->set_json_schema(Dump(value));
    return absl::OkStatus();
  }
  if (text_allowed && value.is_string()) {
    out->set_json_schema(value.get<std::string>());
    return absl::OkStatus();
  }
  return TypeError(param, text_allowed ? "a JSON Schema (an object, or JSON text)" : "a JSON Schema object", value);
}

absl::Status String(const json& value, const std::string& param, std::string* out) {
  if (!value.is_string()) return TypeError(param, "a string", value);
  *out = value.get<std::string>();
  return absl::OkStatus();
}

absl::Status Choice(const json& value, const std::string& param, v1::Constraint* out) {
  if (!value.is_array()) return TypeError(param, "a list of strings", value);
  v1::ChoiceList* list = out->mutable_choice();
  for (const json& one : value) {
    if (!one.is_string()) return TypeError(param, "a list of strings", one);
    list->add_choices(one.get<std::string>());
  }
  return absl::OkStatus();
}

absl::Status ResponseFormat(const json& rf, std::vector<Asked>* asked) {
  if (!rf.is_object()) return TypeError("response_format", "an object", rf);
  const json* type = Field(rf, "type");
  if (type == nullptr) return InvalidParam("response_format.type", "response_format.type is required");
  if (!type->is_string()) return TypeError("response_format.type", "a string", *type);
  const std::string t = type->get<std::string>();
  if (t == "text") return absl::OkStatus();
  if (t == "json_object") {
    asked->emplace_back("response_format");
    asked->back().constraint.set_json_object(true);
    return absl::OkStatus();
  }
  if (t != "json_schema") {
    return InvalidParam("response_format.type",
                        absl::StrCat("response_format.type = \"", t,
                                     "\": must be \"text\", \"json_object\" or \"json_schema\""));
  }
  const json* js = Field(rf, "json_schema");
  if (js == nullptr) {
    return InvalidParam("response_format.json_schema",
                        "response_format.json_schema is required when response_format.type is \"json_schema\"");
  }
  if (!js->is_object()) return TypeError("response_format.json_schema", "an object", *js);
  for (const char* name : {"name", "description"}) {
    if (const json* v = Field(*js, name); v != nullptr && !v->is_string()) {
      return TypeError(absl::StrCat("response_format.json_schema.", name), "a string", *v);
    }
  }
  if (const json* v = Field(*js, "strict"); v != nullptr && !v->is_boolean()) {
    return TypeError("response_format.json_schema.strict", "a boolean", *v);
  }
  const json* schema = Field(*js, "schema");
  if (schema == nullptr) {
    return InvalidParam("response_format.json_schema.schema", "response_format.json_schema.schema is required");
  }
  asked->emplace_back("response_format");
  return Schema(*schema, "response_format.json_schema.schema", /*text_allowed=*/false, &asked->back().constraint);
}

absl::Status StructuredOutputs(const json& so, std::vector<Asked>* asked) {
  if (!so.is_object()) return TypeError("structured_outputs", "an object", so);
  for (const auto& [key, value] : so.items()) {
    if (value.is_null()) continue;
    const std::string param = absl::StrCat("structured_outputs.", key);
    Asked a(param);
    if (key == "json") {
      if (absl::Status s = Schema(value, param, /*text_allowed=*/true, &a.constraint); !s.ok()) return s;
    } else if (key == "regex") {
      if (absl::Status s = String(value, param, a.constraint.mutable_regex()); !s.ok()) return s;
    } else if (key == "choice") {
      if (absl::Status s = Choice(value, param, &a.constraint); !s.ok()) return s;
    } else if (key == "grammar") {
      if (absl::Status s = String(value, param, a.constraint.mutable_grammar()); !s.ok()) return s;
    } else if (key == "json_object") {
      if (!value.is_boolean()) return TypeError(param, "a boolean", value);
      if (!value.get<bool>()) continue;
      a.constraint.set_json_object(true);
    } else if (key == "disable_any_whitespace" || key == "disable_fallback" || key == "disable_additional_properties" ||
               key == "whitespace_pattern" || key == "backend") {
      continue;  // vLLM's backend tuning; Tessera has one backend and its own whitespace bound.
    } else {
      return InvalidParam(param, absl::StrCat(param, " is not a structured output (json, regex, choice, grammar, "
                                              "json_object)"));
    }
    asked->push_back(std::move(a));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseStructuredOutputs(const json& body, v1::Constraint* constraint) {
  std::vector<Asked> asked;
  if (const json* rf = Field(body, "response_format"); rf != nullptr) {
    if (absl::Status s = ResponseFormat(*rf, &asked); !s.ok()) return s;
  }
  if (const json* v = Field(body, "guided_json"); v != nullptr) {
    asked.emplace_back("guided_json");
    if (absl::Status s = Schema(*v, "guided_json", /*text_allowed=*/true, &asked.back().constraint); !s.ok()) return s;
  }
  if (const json* v = Field(body, "guided_regex"); v != nullptr) {
    asked.emplace_back("guided_regex");
    if (absl::Status s = String(*v, "guided_regex", asked.back().constraint.mutable_regex()); !s.ok()) return s;
  }
  if (const json* v = Field(body, "guided_choice"); v != nullptr) {
    asked.emplace_back("guided_choice");
    if (absl::Status s = Choice(*v, "guided_choice", &asked.back().constraint); !s.ok()) return s;
  }
  if (const json* v = Field(body, "guided_grammar"); v != nullptr) {
    asked.emplace_back("guided_grammar");
    if (absl::Status s = String(*v, "guided_grammar", asked.back().constraint.mutable_grammar()); !s.ok()) return s;
  }
  if (const json* so = Field(body, "structured_outputs"); so != nullptr) {
    if (absl::Status s = StructuredOutputs(*so, &asked); !s.ok()) return s;
  }
  if (asked.size() > 1) {
    std::vector<std::string> params;
    for (const Asked& a : asked) params.push_back(a.param);
    return InvalidParam(asked[1].param, absl::StrCat("only one structured output constraint per request; got ",
                                                     absl::StrJoin(params, ", ")));
  }
  if (asked.size() == 1) *constraint = std::move(asked[0].constraint);
  return absl::OkStatus();
}

}  // namespace tessera::http
