#include "coordinator/api/request_validation.h"

#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/structured/constraint_grammar.h"
#include "coordinator/api/chat_prompt.h"

namespace tessera {
namespace {

absl::Status Bad(absl::string_view field, absl::string_view value, absl::string_view rule) {
  return absl::InvalidArgumentError(absl::StrCat(field, " = ", value, ": ", rule));
}

std::string F(float v) { return absl::StrCat(v); }

// Compiled grammars of recent constraints: a service sends the same schema again and
// again, and the engine's grammars live on the workers; here compiling only checks it.
structured::GrammarCache& ConstraintGrammars() {
  static auto* cache = new structured::GrammarCache(256);
  return *cache;
}

// The request's constraint as GBNF, compiled once to check it: INVALID_ARGUMENT naming
// `constraint.<kind>` and what is wrong (an unsupported schema keyword, regex construct
// or grammar error), RESOURCE_EXHAUSTED past the engine's bounds.
absl::StatusOr<std::string> CompileConstraint(const v1::Constraint& c, const ServingLimits& limits) {
  structured::OutputConstraint oc;
  std::string field;
  switch (c.kind_case()) {
    case v1::Constraint::kJsonSchema:
      oc.kind = structured::OutputConstraint::Kind::kJsonSchema;
      oc.text = c.json_schema();
      field = "constraint.json_schema";
      break;
    case v1::Constraint::kJsonObject:
      if (!c.json_object()) return std::string();
      oc.kind = structured::OutputConstraint::Kind::kJsonObject;
      field = "constraint.json_object";
      break;
    case v1::Constraint::kRegex:
      oc.kind = structured::OutputConstraint::Kind::kRegex;
      oc.text = c.regex();
      field = "constraint.regex";
      break;
    case v1::Constraint::kChoice:
      oc.kind = structured::OutputConstraint::Kind::kChoice;
      oc.choices.assign(c.choice().choices().begin(), c.choice().choices().end());
      field = "constraint.choice";
      break;
    case v1::Constraint::kGrammar:
      oc.kind = structured::OutputConstraint::Kind::kGrammar;
      oc.text = c.grammar();
      field = "constraint.grammar";
      break;
    case v1::Constraint::KIND_NOT_SET:
      return std::string();
  }
  size_t bytes = oc.text.size();
  for (const std::string& choice : oc.choices) bytes += choice.size();
  if (absl::Status s = CheckInputSize(field, bytes, limits); !s.ok()) return s;
  absl::StatusOr<std::string> gbnf = structured::ConstraintToGbnf(oc);
  absl::Status status = gbnf.status();
  if (gbnf.ok()) status = ConstraintGrammars().Get(*gbnf).status();
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat(field, ": ", status.message()));
  }
  return *std::move(gbnf);
}

absl::Status ValidateSampling(const v1::SamplingParameters& s, SamplingParams* p) {
  if (s.has_temperature()) {
    if (!std::isfinite(s.temperature()) || s.temperature() < 0) {
      return Bad("sampling.temperature", F(s.temperature()), "must be >= 0 (0 is greedy)");
    }
    p->temperature = s.temperature();
  }
  if (s.has_top_p()) {
    if (!(s.top_p() > 0 && s.top_p() <= 1)) return Bad("sampling.top_p", F(s.top_p()), "must be in (0, 1]");
    p->top_p = s.top_p();
  }
  if (s.has_top_k()) {
    if (s.top_k() < 0) return Bad("sampling.top_k", absl::StrCat(s.top_k()), "must be >= 0 (0 disables)");
    p->top_k = s.top_k();
  }
  if (s.has_min_p()) {
    if (!(s.min_p() >= 0 && s.min_p() < 1)) return Bad("sampling.min_p", F(s.min_p()), "must be in [0, 1)");
    p->min_p = s.min_p();
  }
  if (s.has_repetition_penalty()) {
    if (!(s.repetition_penalty() > 0) || !std::isfinite(s.repetition_penalty())) {
      return Bad("sampling.repetition_penalty", F(s.repetition_penalty()), "must be > 0 (1 disables)");
    }
    p->repetition_penalty = s.repetition_penalty();
  }
  if (s.has_presence_penalty()) {
    if (!(s.presence_penalty() >= -2 && s.presence_penalty() <= 2)) {
      return Bad("sampling.presence_penalty", F(s.presence_penalty()), "must be in [-2, 2]");
    }
    p->presence_penalty = s.presence_penalty();
  }
  if (s.has_frequency_penalty()) {
    if (!(s.frequency_penalty() >= -2 && s.frequency_penalty() <= 2)) {
      return Bad("sampling.frequency_penalty", F(s.frequency_penalty()), "must be in [-2, 2]");
    }
    p->frequency_penalty = s.frequency_penalty();
  }
  if (s.has_seed()) {
    p->seed = s.seed();
    p->has_seed = true;
  } else {
    // Fixed at admission so preemption and recompute draw the same tokens.
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    p->seed = rng();
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckInputSize(absl::string_view field, size_t num_bytes, const ServingLimits& limits) {
  if (static_cast<int64_t>(num_bytes) <= limits.max_input_bytes) return absl::OkStatus();
  return Bad(field, absl::StrCat("<", num_bytes, " bytes>"),
             absl::StrCat("must be at most ", limits.max_input_bytes, " bytes (--max-input-bytes)"));
}

absl::StatusOr<ValidatedRequest> ValidateGenerateRequest(const v1::GenerateRequest& r,
                                                         const Tokenizer& tokenizer,
                                                         const ServingLimits& limits,
                                                         const ChatTemplate* chat_template) {
  ValidatedRequest out;
  if (r.request_id().size() > 256) {
    return Bad("request_id", absl::StrCat("<", r.request_id().size(), " bytes>"), "must be at most 256 bytes");
  }
  out.request_id = r.request_id();

  switch (r.input_case()) {
    case v1::GenerateRequest::kText:
      if (r.text().empty()) return Bad("text", "\"\"", "must not be empty");
      if (absl::Status s = CheckInputSize("text", r.text().size(), limits); !s.ok()) return s;
      out.prompt = tokenizer.Encode(r.text(), !r.no_bos());
      break;
    case v1::GenerateRequest::kTokenIds:
      if (r.token_ids().ids().empty()) return Bad("token_ids", "[]", "must not be empty");
      for (int i = 0; i < r.token_ids().ids_size(); ++i) {
        const int32_t id = r.token_ids().ids(i);
        if (id < 0 || id >= limits.vocab_size) {
          return Bad(absl::StrCat("token_ids[", i, "]"), absl::StrCat(id),
                     absl::StrCat("outside the vocabulary [0, ", limits.vocab_size, ")"));
        }
      }
      out.prompt.assign(r.token_ids().ids().begin(), r.token_ids().ids().end());
      break;
    case v1::GenerateRequest::kMessages: {
      auto prompt = EncodeChatPrompt(r.messages(), chat_template, tokenizer, limits);
      if (!prompt.ok()) return prompt.status();
      out.prompt = *std::move(prompt);
      if (out.prompt.empty()) return Bad("messages", "<rendered to no tokens>", "the chat template produced an empty prompt");
      break;
    }
    default:
      return Bad("input", "unset", "set text, token_ids or messages");
  }
  if (static_cast<int>(out.prompt.size()) >= limits.max_context) {
    return Bad("input", absl::StrCat(out.prompt.size(), " tokens"),
               absl::StrCat("the prompt must be shorter than the context of ", limits.max_context, " tokens"));
  }

  out.sampling = limits.default_sampling;
  if (absl::Status s = ValidateSampling(r.sampling(), &out.sampling); !s.ok()) return s;
  if (r.logprobs() > static_cast<uint32_t>(limits.max_logprobs)) {
    return Bad("logprobs", absl::StrCat(r.logprobs()), absl::StrCat("must be at most ", limits.max_logprobs));
  }
  out.sampling.num_logprobs = static_cast<int>(r.logprobs());

  const v1::StoppingCriteria& st = r.stopping();
  int max_new = limits.default_max_new_tokens;
  if (st.has_max_new_tokens()) {
    if (st.max_new_tokens() == 0) return Bad("stopping.max_new_tokens", "0", "must be at least 1");
    if (st.max_new_tokens() > static_cast<uint32_t>(limits.max_context)) {
      return Bad("stopping.max_new_tokens", absl::StrCat(st.max_new_tokens()),
                 absl::StrCat("exceeds the context of ", limits.max_context, " tokens"));
    }
    max_new = static_cast<int>(st.max_new_tokens());
  }
  if (static_cast<int>(out.prompt.size()) + max_new > limits.max_context) {
    return Bad("stopping.max_new_tokens", absl::StrCat(max_new),
               absl::StrCat("prompt (", out.prompt.size(), " tokens) + max_new_tokens exceeds the context of ",
                            limits.max_context, " tokens"));
  }
  if (st.min_new_tokens() > static_cast<uint32_t>(max_new)) {
    return Bad("stopping.min_new_tokens", absl::StrCat(st.min_new_tokens()),
               absl::StrCat("must not exceed max_new_tokens (", max_new, ")"));
  }
  if (st.stop_size() > limits.max_stop_strings) {
    return Bad("stopping.stop", absl::StrCat(st.stop_size(), " strings"),
               absl::StrCat("at most ", limits.max_stop_strings, " stop strings"));
  }
  for (int i = 0; i < st.stop_size(); ++i) {
    if (st.stop(i).empty()) return Bad(absl::StrCat("stopping.stop[", i, "]"), "\"\"", "must not be empty");
    if (static_cast<int>(st.stop(i).size()) > limits.max_stop_string_bytes) {
      return Bad(absl::StrCat("stopping.stop[", i, "]"), absl::StrCat("<", st.stop(i).size(), " bytes>"),
                 absl::StrCat("must be at most ", limits.max_stop_string_bytes, " bytes"));
    }
    out.stop_strings.push_back(st.stop(i));
  }
  for (int i = 0; i < st.stop_token_ids_size(); ++i) {
    const int32_t id = st.stop_token_ids(i);
    if (id < 0 || id >= limits.vocab_size) {
      return Bad(absl::StrCat("stopping.stop_token_ids[", i, "]"), absl::StrCat(id),
                 absl::StrCat("outside the vocabulary [0, ", limits.vocab_size, ")"));
    }
    out.options.stop_token_ids.push_back(id);
  }
  out.options.max_new_tokens = max_new;
  out.options.min_new_tokens = static_cast<int>(st.min_new_tokens());
  out.options.ignore_eos = st.ignore_eos();
  out.options.priority = r.priority();
  if (r.has_constraint()) {
    ASSIGN_OR_RETURN(out.grammar_gbnf, CompileConstraint(r.constraint(), limits));
  }
  return out;
}

}  // namespace tessera
