#include "coordinator/http/openai_request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/memory_releaser.h"
#include "coordinator/http/json_params.h"
#include "coordinator/http/structured_output_params.h"
#include "nlohmann/json.hpp"

namespace tessera::http {
namespace {

using json = nlohmann::json;

absl::Status Number(const json& body, const char* name, std::optional<double>* out) {
  const json* v = Field(body, name);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number()) return TypeError(name, "a number", *v);
  *out = v->get<double>();
  return absl::OkStatus();
}

absl::Status Integer(const json& body, const char* name, std::optional<int64_t>* out) {
  const json* v = Field(body, name);
  if (v == nullptr) return absl::OkStatus();
  // 3.0 is accepted as 3: some clients serialize every number as a float.
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (std::floor(d) != d || std::abs(d) > 9e15) return TypeError(name, "an integer", *v);
    *out = static_cast<int64_t>(d);
    return absl::OkStatus();
  }
  if (!v->is_number_integer()) return TypeError(name, "an integer", *v);
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return InvalidParam(name, absl::StrCat(name, " is out of range"));
  }
  *out = v->get<int64_t>();
  return absl::OkStatus();
}

absl::Status Bool(const json& body, const char* name, std::optional<bool>* out) {
  const json* v = Field(body, name);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_boolean()) return TypeError(name, "a boolean", *v);
  *out = v->get<bool>();
  return absl::OkStatus();
}

// Proto float fields: a double that does not fit is passed as inf so validation names it.
float ToFloat(double d) {
  if (std::abs(d) > std::numeric_limits<float>::max()) return d > 0 ? INFINITY : -INFINITY;
  return static_cast<float>(d);
}

absl::Status ParsePrompt(const json& body, v1::GenerateRequest* g) {
  const json* p = Field(body, "prompt");
  if (p == nullptr) return InvalidParam("prompt", "prompt is required");
  if (p->is_string()) {
    g->set_text(p->get<std::string>());
    return absl::OkStatus();
  }
  if (!p->is_array()) return TypeError("prompt", "a string, a list of one string or a list of token ids", *p);
  if (p->empty()) return InvalidParam("prompt", "prompt must not be empty");
  const json* ids = p;
  if ((*p)[0].is_string() || (*p)[0].is_array()) {
    // A batch: Tessera serves one prompt per request.
    if (p->size() != 1) {
      return InvalidParam("prompt", absl::StrCat("prompt holds ", p->size(),
                                                 " prompts; this server takes one prompt per request"));
    }
    if ((*p)[0].is_string()) {
      g->set_text((*p)[0].get<std::string>());
      return absl::OkStatus();
    }
    ids = &(*p)[0];
    if (ids->empty()) return InvalidParam("prompt", "prompt must not be empty");
  }
  for (size_t i = 0; i < ids->size(); ++i) {
    const json& id = (*ids)[i];
    if (!id.is_number_integer() || id.get<int64_t>() < std::numeric_limits<int32_t>::min() ||
        id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return TypeError("prompt", "a string or a list of token ids (integers)", id);
    }
    g->mutable_token_ids()->add_ids(static_cast<int32_t>(id.get<int64_t>()));
  }
  return absl::OkStatus();
}

// Whether a message carries fields past role and content (tool calling).
bool HasToolFields(const json& message) {
  return message.is_object() &&
         (message.contains("tool_calls") || message.contains("tool_call_id") || message.contains("name"));
}

// `ordered` is the body's order-keeping parse, when one was made.
absl::Status ParseMessages(const json& body, const nlohmann::ordered_json* ordered, std::vector<ChatMessage>* out) {
  const json* m = Field(body, "messages");
  if (m == nullptr) return InvalidParam("messages", "messages is required");
  if (!m->is_array()) return TypeError("messages", "a list of messages", *m);
  if (m->empty()) return InvalidParam("messages", "messages must not be empty");
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string where = absl::StrCat("messages[", i, "]");
    if (!msg.is_object()) return TypeError(where, "an object", msg);
    ChatMessage cm;
    const json* role = Field(msg, "role");
    if (role == nullptr || !role->is_string()) {
      return InvalidParam("messages", absl::StrCat(where, ".role must be a string"));
    }
    cm.role = role->get<std::string>();
    if (const json* c = Field(msg, "content"); c != nullptr) {
      if (c->is_string()) {
        cm.content = c->get<std::string>();
      } else if (c->is_array()) {
        // Content parts: text only (this server has no image or audio input).
        for (const json& part : *c) {
          const json* type = part.is_object() ? Field(part, "type") : nullptr;
          const json* text = part.is_object() ? Field(part, "text") : nullptr;
          if (type == nullptr || *type != "text" || text == nullptr || !text->is_string()) {
            return InvalidParam("messages", absl::StrCat(where, ".content: only parts of type \"text\" are supported"));
          }
          cm.content += text->get<std::string>();
        }
      } else {
        return InvalidParam("messages", absl::StrCat(where, ".content must be a string or a list of text parts"));
      }
    }
    if (HasToolFields(msg)) {
      const nlohmann::ordered_json one = ordered != nullptr ? (*ordered)["messages"][i] : nlohmann::ordered_json(msg);
      if (absl::Status s = ParseMessageToolFields(one, i, &cm); !s.ok()) return s;
    }
    out->push_back(std::move(cm));
  }
  return absl::OkStatus();
}

absl::Status ParseStop(const json& body, v1::StoppingCriteria* st) {
  const json* s = Field(body, "stop");
  if (s == nullptr) return absl::OkStatus();
  if (s->is_string()) {
    st->add_stop(s->get<std::string>());
    return absl::OkStatus();
  }
  if (!s->is_array()) return TypeError("stop", "a string or a list of strings", *s);
  for (const json& one : *s) {
    if (!one.is_string()) return TypeError("stop", "a string or a list of strings", one);
    st->add_stop(one.get<std::string>());
  }
  return absl::OkStatus();
}

// Whether the body has fields read from the order-keeping parse.
bool NeedsKeyOrder(const json& body, bool chat) {
  for (const char* name : {"response_format", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
                           "structured_outputs"}) {
    if (Field(body, name) != nullptr) return true;
  }
  if (!chat) return false;
  for (const char* name : {"tools", "tool_choice", "parallel_tool_calls"}) {
    if (Field(body, name) != nullptr) return true;
  }
  const json* messages = Field(body, "messages");
  if (messages == nullptr || !messages->is_array()) return false;
  for (const json& m : *messages) {
    if (m.is_object() && m.contains("tool_calls")) return true;
  }
  return false;
}

// The tessera.v1 field a request_validation message starts with, renamed.
std::string OpenAiName(absl::string_view field, Endpoint endpoint) {
  const bool chat = endpoint == Endpoint::kChatCompletions;
  if (absl::StartsWith(field, "sampling.")) return std::string(field.substr(9));
  if (field == "stopping.max_new_tokens") return "max_tokens";
  if (field == "stopping.min_new_tokens") return "min_tokens";
  if (absl::StartsWith(field, "stopping.stop_token_ids")) return "stop_token_ids";
  if (absl::StartsWith(field, "stopping.stop")) return "stop";
  if (field == "text" || absl::StartsWith(field, "token_ids") || field == "input") {
    return chat ? "messages" : "prompt";
  }
  if (field == "logprobs") return chat ? "top_logprobs" : "logprobs";
  if (field == "request_id") return "user";
  return std::string(field);
}

}  // namespace

absl::Status InvalidParam(absl::string_view param, absl::string_view message) {
  absl::Status s = absl::InvalidArgumentError(message);
  s.SetPayload(kParamPayload, absl::Cord(param));
  return s;
}

std::string ParamOf(const absl::Status& status, Endpoint endpoint) {
  if (auto p = status.GetPayload(kParamPayload); p.has_value()) return std::string(*p);
  if (!absl::IsInvalidArgument(status)) return "";
  const absl::string_view m = status.message();
  const size_t eq = m.find(" = ");
  if (eq == absl::string_view::npos || m.substr(0, eq).find(' ') != absl::string_view::npos) return "";
  return OpenAiName(m.substr(0, eq), endpoint);
}

std::string OpenAiMessage(const absl::Status& status, Endpoint endpoint) {
  const absl::string_view m = status.message();
  if (status.GetPayload(kParamPayload).has_value() || !absl::IsInvalidArgument(status)) return std::string(m);
  const size_t eq = m.find(" = ");
  if (eq == absl::string_view::npos || m.substr(0, eq).find(' ') != absl::string_view::npos) return std::string(m);
  return absl::StrCat(OpenAiName(m.substr(0, eq), endpoint), m.substr(eq));
}

absl::Status CheckJsonShape(absl::string_view body) {
  // A pass that builds nothing: counts values and tracks depth, and stops at the first
  // one over a limit (nlohmann's SAX interface; returning false ends the parse).
  struct Shape : nlohmann::json_sax<json> {
    int depth = 0;
    size_t values = 0;
    bool too_deep = false;
    bool too_many = false;
    bool invalid = false;
    bool Value() {
      if (++values > kMaxJsonValues) too_many = true;
      return !too_many;
    }
    bool Open() {
      if (++depth > kMaxJsonDepth) too_deep = true;
      return !too_deep && Value();
    }
    bool null() override { return Value(); }
    bool boolean(bool) override { return Value(); }
    bool number_integer(number_integer_t) override { return Value(); }
    bool number_unsigned(number_unsigned_t) override { return Value(); }
    bool number_float(number_float_t, const string_t&) override { return Value(); }
    bool string(string_t&) override { return Value(); }
    bool binary(binary_t&) override { return Value(); }
    bool start_object(std::size_t) override { return Open(); }
    bool key(string_t&) override { return true; }
    bool end_object() override { --depth; return true; }
    bool start_array(std::size_t) override { return Open(); }
    bool end_array() override { --depth; return true; }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
      invalid = true;
      return false;
    }
  } shape;
  json::sax_parse(body.begin(), body.end(), &shape, json::input_format_t::json, /*strict=*/true);
  if (shape.too_deep) {
    return InvalidParam("", absl::StrCat("the request body nests JSON arrays and objects more than ", kMaxJsonDepth,
                                         " levels deep (the limit)"));
  }
  if (shape.too_many) {
    return InvalidParam("", absl::StrCat("the request body holds more than ", kMaxJsonValues,
                                         " JSON values (the limit)"));
  }
  if (shape.invalid) return InvalidParam("", "the request body is not valid JSON");
  return absl::OkStatus();
}

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(absl::string_view body, Endpoint endpoint, int max_logprobs) {
  // What a large body left behind (its DOM, the body itself) goes back to the OS soon.
  struct ReleaseAfter {
    size_t bytes;
    ~ReleaseAfter() { MemoryReleaser::Get().InputDone(bytes); }
  } release_after{body.size()};
  // Before any DOM: a deep body would cost far more than its size, a flat one of
  // millions of numbers 16 bytes a value.
  if (absl::Status s = CheckJsonShape(body); !s.ok()) return s;
  const json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidParam("", "the request body is not valid JSON");
  if (!j.is_object()) return InvalidParam("", "the request body must be a JSON object");
  const bool chat = endpoint == Endpoint::kChatCompletions;

  OpenAiRequest r;
  r.endpoint = endpoint;
  v1::GenerateRequest& g = r.generate;
  if (const json* m = Field(j, "model"); m != nullptr) {
    if (!m->is_string()) return TypeError("model", "a string", *m);
    r.model = m->get<std::string>();
  }
  // Schemas and tools reach the model (their property order shapes a constrained output
  // and the prompt), so they are read from a parse that keeps the client's key order.
  std::optional<nlohmann::ordered_json> ordered;
  if (NeedsKeyOrder(j, chat)) {
    absl::StatusOr<nlohmann::ordered_json> parsed = ParseOrderedJson(body, "the request body");
    if (!parsed.ok()) return InvalidParam("", parsed.status().message());
    ordered = *std::move(parsed);
    v1::Constraint constraint;
    if (absl::Status s = ParseStructuredOutputs(*ordered, &constraint); !s.ok()) return s;
    if (constraint.kind_case() != v1::Constraint::KIND_NOT_SET) *g.mutable_constraint() = std::move(constraint);
    if (chat) {
      if (absl::Status s = ParseToolRequest(*ordered, &r.tools); !s.ok()) return s;
    }
    if (g.has_constraint() && (r.tools.choice == ToolChoice::kRequired || r.tools.choice == ToolChoice::kNamed)) {
      return InvalidParam("tool_choice", "a tool_choice that forces a call constrains the output itself, so it "
                                         "cannot be combined with response_format or a guided_* constraint");
    }
  } else if (!chat && j.contains("tools")) {
    return InvalidParam("tools", "tools are served on /v1/chat/completions");
  }
  if (chat) {
    if (absl::Status s = ParseMessages(j, ordered.has_value() ? &*ordered : nullptr, &r.messages); !s.ok()) return s;
  } else {
    if (absl::Status s = ParsePrompt(j, &g); !s.ok()) return s;
  }

  std::optional<int64_t> n, best_of, max_tokens, max_completion_tokens, top_k, seed, priority, logprobs_n,
      top_logprobs;
  std::optional<double> temperature, top_p, min_p, presence, frequency, repetition;
  std::optional<bool> stream, echo, ignore_eos, logprobs_flag;
  for (absl::Status s : {Integer(j, "n", &n), Integer(j, "best_of", &best_of), Integer(j, "max_tokens", &max_tokens),
                         Integer(j, "max_completion_tokens", &max_completion_tokens), Integer(j, "top_k", &top_k),
                         Integer(j, "seed", &seed), Integer(j, "priority", &priority),
                         Number(j, "temperature", &temperature), Number(j, "top_p", &top_p),
                         Number(j, "min_p", &min_p), Number(j, "presence_penalty", &presence),
                         Number(j, "frequency_penalty", &frequency), Number(j, "repetition_penalty", &repetition),
                         Bool(j, "stream", &stream), Bool(j, "echo", &echo), Bool(j, "ignore_eos", &ignore_eos)}) {
    if (!s.ok()) return s;
  }
  if (n.has_value() && *n != 1) {
    return InvalidParam("n", absl::StrCat("n = ", *n, ": this server generates one choice per request (n must be 1)"));
  }
  if (best_of.has_value() && *best_of != 1) {
    return InvalidParam("best_of", absl::StrCat("best_of = ", *best_of, ": only best_of = 1 is supported"));
  }
  if (echo.value_or(false)) return InvalidParam("echo", "echo = true is not supported");
  if (const json* u = Field(j, "user"); u != nullptr && !u->is_string()) return TypeError("user", "a string", *u);

  // Logprobs: completions take an integer (alternatives per token, 0 = the sampled token
  // only); chat takes logprobs: bool and top_logprobs: integer.
  if (chat) {
    if (absl::Status s = Bool(j, "logprobs", &logprobs_flag); !s.ok()) return s;
    if (absl::Status s = Integer(j, "top_logprobs", &top_logprobs); !s.ok()) return s;
    r.logprobs = logprobs_flag.value_or(false);
    if (top_logprobs.has_value()) {
      if (*top_logprobs < 0 || *top_logprobs > max_logprobs) {
        return InvalidParam("top_logprobs", absl::StrCat("top_logprobs = ", *top_logprobs, ": must be in [0, ",
                                                         max_logprobs, "]"));
      }
      if (!r.logprobs && *top_logprobs > 0) {
        return InvalidParam("top_logprobs", "top_logprobs needs logprobs = true");
      }
      r.top_logprobs = static_cast<int>(*top_logprobs);
    }
  } else {
    if (absl::Status s = Integer(j, "logprobs", &logprobs_n); !s.ok()) return s;
    if (logprobs_n.has_value()) {
      if (*logprobs_n < 0 || *logprobs_n > max_logprobs) {
        return InvalidParam("logprobs",
                            absl::StrCat("logprobs = ", *logprobs_n, ": must be in [0, ", max_logprobs, "]"));
      }
      r.logprobs = true;
      r.top_logprobs = static_cast<int>(*logprobs_n);
    }
  }
  if (r.logprobs) g.set_logprobs(static_cast<uint32_t>(std::max(1, r.top_logprobs)));

  r.stream = stream.value_or(false);
  if (const json* so = Field(j, "stream_options"); so != nullptr) {
    if (!so->is_object()) return TypeError("stream_options", "an object", *so);
    if (!r.stream) return InvalidParam("stream_options", "stream_options needs stream = true");
    std::optional<bool> usage;
    if (absl::Status s = Bool(*so, "include_usage", &usage); !s.ok()) {
      return InvalidParam("stream_options", s.message());
    }
    r.include_usage = usage.value_or(false);
  }

  v1::SamplingParameters* sp = g.mutable_sampling();
  if (temperature.has_value()) sp->set_temperature(ToFloat(*temperature));
  if (top_p.has_value()) sp->set_top_p(ToFloat(*top_p));
  // vLLM's -1 means "no top-k"; Tessera spells that 0.
  if (top_k.has_value()) {
    if (*top_k < -1 || *top_k > std::numeric_limits<int32_t>::max()) {
      return InvalidParam("top_k", absl::StrCat("top_k = ", *top_k, ": must be >= -1 (-1 or 0 disables)"));
    }
    sp->set_top_k(*top_k == -1 ? 0 : static_cast<int32_t>(*top_k));
  }
  if (min_p.has_value()) sp->set_min_p(ToFloat(*min_p));
  if (presence.has_value()) sp->set_presence_penalty(ToFloat(*presence));
  if (frequency.has_value()) sp->set_frequency_penalty(ToFloat(*frequency));
  if (repetition.has_value()) sp->set_repetition_penalty(ToFloat(*repetition));
  if (seed.has_value()) sp->set_seed(static_cast<uint64_t>(*seed));

  v1::StoppingCriteria* st = g.mutable_stopping();
  // Chat's max_completion_tokens replaced max_tokens; both are accepted, the new one wins.
  const char* max_name = "max_tokens";
  if (chat && max_completion_tokens.has_value()) {
    max_tokens = max_completion_tokens;
    max_name = "max_completion_tokens";
  }
  if (max_tokens.has_value()) {
    if (*max_tokens < 1 || *max_tokens > std::numeric_limits<uint32_t>::max()) {
      return InvalidParam(max_name, absl::StrCat(max_name, " = ", *max_tokens, ": must be at least 1"));
    }
    st->set_max_new_tokens(static_cast<uint32_t>(*max_tokens));
    r.max_tokens_set = true;
  }
  if (absl::Status s = ParseStop(j, st); !s.ok()) return s;
  // vLLM's extensions: stop_token_ids and min_tokens.
  if (const json* ids = Field(j, "stop_token_ids"); ids != nullptr) {
    if (!ids->is_array()) return TypeError("stop_token_ids", "a list of token ids", *ids);
    for (const json& id : *ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return TypeError("stop_token_ids", "a list of token ids", id);
      }
      st->add_stop_token_ids(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
  std::optional<int64_t> min_tokens;
  if (absl::Status s = Integer(j, "min_tokens", &min_tokens); !s.ok()) return s;
  if (min_tokens.has_value()) {
    if (*min_tokens < 0 || *min_tokens > std::numeric_limits<uint32_t>::max()) {
      return InvalidParam("min_tokens", absl::StrCat("min_tokens = ", *min_tokens, ": must be >= 0"));
    }
    st->set_min_new_tokens(static_cast<uint32_t>(*min_tokens));
  }
  if (ignore_eos.has_value()) st->set_ignore_eos(*ignore_eos);
  if (priority.has_value()) {
    if (*priority < std::numeric_limits<int32_t>::min() || *priority > std::numeric_limits<int32_t>::max()) {
      return InvalidParam("priority", absl::StrCat("priority = ", *priority, ": out of the int32 range"));
    }
    g.set_priority(static_cast<int32_t>(*priority));
  }
  return r;
}

}  // namespace tessera::http
