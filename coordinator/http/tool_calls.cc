#include "coordinator/http/tool_calls.h"

#include <random>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "coordinator/http/json_params.h"
#include "nlohmann/json.hpp"

namespace tessera::http {
namespace {

using json = nlohmann::ordered_json;

constexpr absl::string_view kHermesOpen = "<tool_call>";
constexpr absl::string_view kHermesClose = "</tool_call>";
constexpr absl::string_view kMistralMarker = "[TOOL_CALLS]";
constexpr absl::string_view kLlamaPythonTag = "<|python_tag|>";

// The end (one past) of the JSON object or array that opens at text[start], found by
// bracket depth outside strings; npos when it does not close. Parsing the span is left to
// the JSON parser: this only says where one value of a sequence ends.
size_t JsonValueEnd(absl::string_view text, size_t start) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = start; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return absl::string_view::npos;
}

size_t SkipSpace(absl::string_view text, size_t pos) {
  while (pos < text.size() && absl::ascii_isspace(static_cast<unsigned char>(text[pos]))) ++pos;
  return pos;
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// {"name": ..., "arguments" or "parameters": ...} as a call; nullopt otherwise.
std::optional<ToolCall> CallFromJson(const json& j, ToolCallFormat format) {
  if (!j.is_object()) return std::nullopt;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) return std::nullopt;
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  if (args == j.end()) return std::nullopt;
  ToolCall call;
  call.id = NewToolCallId(format);
  call.name = name->get<std::string>();
  if (args->is_null()) {
    call.arguments = "{}";
  } else if (args->is_string()) {
    // Arguments the model wrote as JSON text already.
    const std::string& s = args->get_ref<const std::string&>();
    call.arguments = json::accept(s) ? s : Dump(*args);
  } else {
    call.arguments = Dump(*args);
  }
  return call;
}

std::optional<ToolCall> CallFromText(absl::string_view text, ToolCallFormat format) {
  absl::StatusOr<json> j = ParseOrderedJson(absl::StripAsciiWhitespace(text), "a tool call");
  if (!j.ok()) return std::nullopt;
  return CallFromJson(*j, format);
}

std::string ContentBefore(absl::string_view text, size_t at) {
  const absl::string_view before = text.substr(0, at);
  return absl::StripAsciiWhitespace(before).empty() ? std::string() : std::string(before);
}

// Objects separated by ';' (vLLM's llama3_json), the whole output.
std::optional<ParsedToolCalls> ParseLlama3Json(absl::string_view text) {
  size_t pos = SkipSpace(text, 0);
  if (absl::StartsWith(text.substr(pos), kLlamaPythonTag)) pos = SkipSpace(text, pos + kLlamaPythonTag.size());
  if (pos >= text.size() || text[pos] != '{') return std::nullopt;
  ParsedToolCalls out;
  while (true) {
    const size_t end = JsonValueEnd(text, pos);
    if (end == absl::string_view::npos) return std::nullopt;
    std::optional<ToolCall> call = CallFromText(text.substr(pos, end - pos), ToolCallFormat::kLlama3Json);
    if (!call.has_value()) return std::nullopt;
    out.calls.push_back(*std::move(call));
    pos = SkipSpace(text, end);
    if (pos == text.size()) return out;
    if (text[pos] != ';') return std::nullopt;
    pos = SkipSpace(text, pos + 1);
    if (pos == text.size()) return out;  // A trailing separator.
    if (text[pos] != '{') return std::nullopt;
  }
}

// <tool_call>...</tool_call> blocks; the last may be unclosed (the output ended first).
std::optional<ParsedToolCalls> ParseHermes(absl::string_view text) {
  size_t open = text.find(kHermesOpen);
  if (open == absl::string_view::npos) return std::nullopt;
  ParsedToolCalls out;
  out.content = ContentBefore(text, open);
  while (open != absl::string_view::npos) {
    const size_t body = open + kHermesOpen.size();
    const size_t close = text.find(kHermesClose, body);
    const size_t body_end = close == absl::string_view::npos ? text.size() : close;
    std::optional<ToolCall> call = CallFromText(text.substr(body, body_end - body), ToolCallFormat::kHermes);
    if (!call.has_value()) return std::nullopt;
    out.calls.push_back(*std::move(call));
    if (close == absl::string_view::npos) break;
    open = text.find(kHermesOpen, close + kHermesClose.size());
  }
  return out;
}

// [TOOL_CALLS] then a JSON list of calls.
std::optional<ParsedToolCalls> ParseMistral(absl::string_view text, bool forced) {
  ParsedToolCalls out;
  size_t pos;
  const size_t marker = text.find(kMistralMarker);
  if (marker != absl::string_view::npos) {
    out.content = ContentBefore(text, marker);
    pos = marker + kMistralMarker.size();
  } else if (forced) {
    pos = 0;
  } else {
    return std::nullopt;
  }
  pos = SkipSpace(text, pos);
  if (pos >= text.size() || text[pos] != '[') return std::nullopt;
  const size_t end = JsonValueEnd(text, pos);
  if (end == absl::string_view::npos || SkipSpace(text, end) != text.size()) return std::nullopt;
  absl::StatusOr<json> list = ParseOrderedJson(text.substr(pos, end - pos), "tool calls");
  if (!list.ok() || !list->is_array() || list->empty()) return std::nullopt;
  for (const json& one : *list) {
    std::optional<ToolCall> call = CallFromJson(one, ToolCallFormat::kMistral);
    if (!call.has_value()) return std::nullopt;
    out.calls.push_back(*std::move(call));
  }
  return out;
}

}  // namespace

ToolCallFormat DetectToolCallFormat(absl::string_view source) {
  if (absl::StrContains(source, kMistralMarker)) return ToolCallFormat::kMistral;
  if (absl::StrContains(source, kHermesOpen)) return ToolCallFormat::kHermes;
  return ToolCallFormat::kLlama3Json;
}

absl::StatusOr<ToolCallFormat> ToolCallFormatFromName(absl::string_view name) {
  if (name == "llama3_json") return ToolCallFormat::kLlama3Json;
  if (name == "hermes") return ToolCallFormat::kHermes;
  if (name == "mistral") return ToolCallFormat::kMistral;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown tool-call format \"", name, "\" (known: llama3_json, hermes, mistral)"));
}

const char* ToolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kMistral:
      return "mistral";
    case ToolCallFormat::kLlama3Json:
      break;
  }
  return "llama3_json";
}

absl::string_view ToolCallMarker(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return kHermesOpen;
    case ToolCallFormat::kMistral:
      return kMistralMarker;
    case ToolCallFormat::kLlama3Json:
      break;
  }
  return "";
}

std::optional<ParsedToolCalls> ParseToolCalls(ToolCallFormat format, absl::string_view text, bool forced) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return ParseHermes(text);
    case ToolCallFormat::kMistral:
      return ParseMistral(text, forced);
    case ToolCallFormat::kLlama3Json:
      break;
  }
  return ParseLlama3Json(text);
}

std::string NewToolCallId(ToolCallFormat format) {
  static constexpr absl::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  const bool mistral = format == ToolCallFormat::kMistral;
  std::string id = mistral ? "" : "call_";
  for (int i = 0; i < (mistral ? 9 : 24); ++i) id += kAlphabet[rng() % kAlphabet.size()];
  return id;
}

int32_t SpecialMarkerId(ToolCallFormat format, const Tokenizer& tokenizer) {
  const absl::string_view marker = ToolCallMarker(format);
  if (marker.empty()) return -1;
  const int32_t id = tokenizer.IdForPiece(marker);
  return id >= 0 && tokenizer.IsSpecial(id) ? id : -1;
}

void AdaptToolCallIds(ToolCallFormat format, std::vector<ChatMessage>* messages) {
  if (format != ToolCallFormat::kMistral) return;
  auto cut = [](nlohmann::ordered_json& id) {
    if (id.is_string() && id.get_ref<const std::string&>().size() > 9) {
      id = id.get_ref<const std::string&>().substr(id.get_ref<const std::string&>().size() - 9);
    }
  };
  for (ChatMessage& m : *messages) {
    if (!m.fields.is_object()) continue;
    if (m.fields.contains("tool_call_id")) cut(m.fields["tool_call_id"]);
    if (m.fields.contains("tool_calls")) {
      for (nlohmann::ordered_json& call : m.fields["tool_calls"]) {
        if (call.is_object() && call.contains("id")) cut(call["id"]);
      }
    }
  }
}

}  // namespace tessera::http
