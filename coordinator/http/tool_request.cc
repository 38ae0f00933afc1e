#include "coordinator/http/tool_request.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "coordinator/http/json_params.h"
#include "coordinator/http/openai_request.h"

namespace tessera::http {
namespace {

using json = nlohmann::ordered_json;

bool ValidFunctionName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') return false;
  }
  return true;
}

absl::Status ParseTool(const json& tool, size_t i, ToolFunction* out) {
  const std::string where = absl::StrCat("tools[", i, "]");
  if (!tool.is_object()) return TypeError("tools", absl::StrCat("a list of tools; ", where, " must be an object"), tool);
  const json* type = Field(tool, "type");
  if (type == nullptr || *type != "function") {
    return InvalidParam("tools", absl::StrCat(where, ".type must be \"function\" (the only kind of tool served)"));
  }
  const json* fn = Field(tool, "function");
  if (fn == nullptr || !fn->is_object()) {
    return InvalidParam("tools", absl::StrCat(where, ".function must be an object"));
  }
  const json* name = Field(*fn, "name");
  if (name == nullptr || !name->is_string() || !ValidFunctionName(name->get<std::string>())) {
    return InvalidParam("tools", absl::StrCat(where, ".function.name must be 1 to 64 of a-z, A-Z, 0-9, _, - and ."));
  }
  out->name = name->get<std::string>();
  if (const json* d = Field(*fn, "description"); d != nullptr && !d->is_string()) {
    return InvalidParam("tools", absl::StrCat(where, ".function.description must be a string"));
  }
  if (const json* s = Field(*fn, "strict"); s != nullptr && !s->is_boolean()) {
    return InvalidParam("tools", absl::StrCat(where, ".function.strict must be a boolean"));
  }
  if (const json* p = Field(*fn, "parameters"); p != nullptr) {
    if (!p->is_object()) return InvalidParam("tools", absl::StrCat(where, ".function.parameters must be a JSON Schema object"));
    out->parameters = *p;
  }
  return absl::OkStatus();
}

absl::Status ParseToolChoice(const json& body, ToolRequest* out) {
  const json* tc = Field(body, "tool_choice");
  const bool has_tools = !out->functions.empty();
  out->choice = has_tools ? ToolChoice::kAuto : ToolChoice::kNone;
  if (tc == nullptr) return absl::OkStatus();
  if (tc->is_string()) {
    const std::string s = tc->get<std::string>();
    if (s == "none") {
      out->choice = ToolChoice::kNone;
      return absl::OkStatus();
    }
    if (s != "auto" && s != "required") {
      return InvalidParam("tool_choice", absl::StrCat("tool_choice = \"", s,
                                                      "\": must be \"none\", \"auto\", \"required\" or "
                                                      "{\"type\": \"function\", \"function\": {\"name\": ...}}"));
    }
    if (!has_tools) return InvalidParam("tool_choice", absl::StrCat("tool_choice = \"", s, "\" needs tools"));
    out->choice = s == "auto" ? ToolChoice::kAuto : ToolChoice::kRequired;
    return absl::OkStatus();
  }
  if (!tc->is_object()) return TypeError("tool_choice", "a string or an object", *tc);
  const json* type = Field(*tc, "type");
  const json* fn = Field(*tc, "function");
  const json* name = fn != nullptr && fn->is_object() ? Field(*fn, "name") : nullptr;
  if (type == nullptr || *type != "function" || name == nullptr || !name->is_string()) {
    return InvalidParam("tool_choice",
                        "tool_choice as an object must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
  }
  out->named = name->get<std::string>();
  if (!has_tools) return InvalidParam("tool_choice", "a tool_choice naming a function needs tools");
  for (const ToolFunction& f : out->functions) {
    if (f.name == out->named) {
      out->choice = ToolChoice::kNamed;
      return absl::OkStatus();
    }
  }
  return InvalidParam("tool_choice",
                      absl::StrCat("tool_choice names the function \"", out->named, "\", which is not among tools"));
}

absl::Status ParseToolCall(const json& call, const std::string& where, json* out) {
  if (!call.is_object()) return InvalidParam("messages", absl::StrCat(where, " must be an object"));
  json parsed = json::object();
  if (const json* id = Field(call, "id"); id != nullptr) {
    if (!id->is_string()) return InvalidParam("messages", absl::StrCat(where, ".id must be a string"));
    parsed["id"] = *id;
  }
  if (const json* type = Field(call, "type"); type != nullptr && *type != "function") {
    return InvalidParam("messages", absl::StrCat(where, ".type must be \"function\""));
  }
  parsed["type"] = "function";
  const json* fn = Field(call, "function");
  const json* name = fn != nullptr && fn->is_object() ? Field(*fn, "name") : nullptr;
  if (name == nullptr || !name->is_string()) {
    return InvalidParam("messages", absl::StrCat(where, ".function.name must be a string"));
  }
  json function = {{"name", *name}, {"arguments", json::object()}};
  if (const json* args = Field(*fn, "arguments"); args != nullptr) {
    if (args->is_string()) {
      if (!args->get<std::string>().empty()) {
        auto value = ParseOrderedJson(args->get<std::string>(), absl::StrCat(where, ".function.arguments"));
        if (!value.ok()) return InvalidParam("messages", value.status().message());
        function["arguments"] = *std::move(value);
      }
    } else {
      // Some clients send the arguments as an object already.
      function["arguments"] = *args;
    }
  }
  parsed["function"] = std::move(function);
  *out = std::move(parsed);
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseToolRequest(const json& body, ToolRequest* out) {
  if (const json* tools = Field(body, "tools"); tools != nullptr) {
    if (!tools->is_array()) return TypeError("tools", "a list of tools", *tools);
    absl::flat_hash_set<std::string> names;
    for (size_t i = 0; i < tools->size(); ++i) {
      ToolFunction f;
      if (absl::Status s = ParseTool((*tools)[i], i, &f); !s.ok()) return s;
      if (!names.insert(f.name).second) {
        return InvalidParam("tools", absl::StrCat("tools name the function \"", f.name, "\" twice"));
      }
      out->functions.push_back(std::move(f));
    }
    if (!tools->empty()) out->tools = *tools;
  }
  if (const json* p = Field(body, "parallel_tool_calls"); p != nullptr) {
    if (!p->is_boolean()) return TypeError("parallel_tool_calls", "a boolean", *p);
    out->parallel_tool_calls = p->get<bool>();
  }
  return ParseToolChoice(body, out);
}

absl::Status ParseMessageToolFields(const json& message, size_t index, ChatMessage* out) {
  const std::string where = absl::StrCat("messages[", index, "]");
  if (const json* name = Field(message, "name"); name != nullptr) {
    if (!name->is_string()) return InvalidParam("messages", absl::StrCat(where, ".name must be a string"));
    out->fields["name"] = *name;
  }
  if (const json* id = Field(message, "tool_call_id"); id != nullptr) {
    if (!id->is_string()) return InvalidParam("messages", absl::StrCat(where, ".tool_call_id must be a string"));
    out->fields["tool_call_id"] = *id;
  }
  if (const json* calls = Field(message, "tool_calls"); calls != nullptr) {
    if (!calls->is_array()) return InvalidParam("messages", absl::StrCat(where, ".tool_calls must be a list"));
    // Clients send [] for "no calls"; templates test only for the key (Llama 3.1's would
    // then refuse the turn as "not one call").
    if (calls->empty()) return absl::OkStatus();
    json parsed = json::array();
    for (size_t i = 0; i < calls->size(); ++i) {
      json call;
      if (absl::Status s = ParseToolCall((*calls)[i], absl::StrCat(where, ".tool_calls[", i, "]"), &call); !s.ok()) {
        return s;
      }
      parsed.push_back(std::move(call));
    }
    out->fields["tool_calls"] = std::move(parsed);
  }
  return absl::OkStatus();
}

}  // namespace tessera::http
