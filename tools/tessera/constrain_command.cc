// `tessera constrain`: a constraint (JSON Schema, regex, choice, GBNF) compiled against a
// model's real vocabulary, with outputs drawn at random from the allowed tokens (no model
// forward pass). What the fuzz tests run the engine through, and where its costs are
// measured: compile time, mask time per state, tokens per document.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/flag_set.h"
#include "common/structured/constraint_grammar.h"
#include "common/structured/grammar.h"
#include "common/structured/token_grammar.h"
#include "common/structured/token_vocabulary.h"
#include "common/tokenizer/token_bytes.h"
#include "common/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tools/tessera/commands.h"

namespace tessera::cli {
namespace {

// ordered_json: a schema's properties keep the order it lists them in.
using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

constexpr char kSummary[] =
    "Compiles a constraint against a model's vocabulary and draws outputs at random from\n"
    "the tokens it allows (no forward pass): the grammar engine on its own.\n"
    "\n"
    "  tessera constrain --model DIR (--json-schema FILE | --regex R | --choice JSON_ARRAY |\n"
    "                    --grammar FILE | --schemas-jsonl FILE) [--samples N] [--seed S]\n"
    "                    [--max-tokens M] [--end-probability P]\n"
    "\n"
    "--schemas-jsonl reads one constraint per line: {\"json_schema\": SCHEMA}, {\"regex\": R},\n"
    "{\"choice\": [..]}, {\"grammar\": G} or {\"json_object\": true}. Prints one JSON line per\n"
    "sample: {\"index\", \"sample\", \"text\", \"complete\", \"tokens\"} (or {\"index\", \"error\"}\n"
    "when the constraint is refused), then {\"summary\": {...}} with compile and mask times.\n"
    "Each step draws uniformly among the allowed tokens; where the grammar is complete it\n"
    "ends with probability P (default 0.5).";

absl::StatusOr<structured::OutputConstraint> ConstraintFromJson(const Json& j) {
  structured::OutputConstraint c;
  using Kind = structured::OutputConstraint::Kind;
  if (j.contains("json_schema")) {
    c.kind = Kind::kJsonSchema;
    c.text = j["json_schema"].is_string() ? j["json_schema"].get<std::string>()
                                          : j["json_schema"].dump();
  } else if (j.contains("regex") && j["regex"].is_string()) {
    c.kind = Kind::kRegex;
    c.text = j["regex"].get<std::string>();
  } else if (j.contains("choice") && j["choice"].is_array()) {
    c.kind = Kind::kChoice;
    for (const Json& s : j["choice"]) {
      if (!s.is_string()) return absl::InvalidArgumentError("choice entries must be strings");
      c.choices.push_back(s.get<std::string>());
    }
  } else if (j.contains("grammar") && j["grammar"].is_string()) {
    c.kind = Kind::kGrammar;
    c.text = j["grammar"].get<std::string>();
  } else if (j.contains("json_object")) {
    c.kind = Kind::kJsonObject;
  } else {
    return absl::InvalidArgumentError(
        "a constraint line needs json_schema, regex, choice, grammar or json_object");
  }
  return c;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct Totals {
  int constraints = 0;
  int refused = 0;
  int samples = 0;
  int complete = 0;
  uint64_t tokens = 0;
  double gbnf_ms = 0, compile_ms = 0, first_mask_ms = 0, max_compile_ms = 0;
  double sample_ms = 0;
  uint64_t masks_computed = 0, masks_reused = 0;
  double mask_seconds = 0;
  uint64_t automaton_states = 0;  // Summed over the constraints' automata.
};

}  // namespace

int ConstrainMain(int argc, char** argv) {
  std::string model, json_schema_file, regex, choice, grammar_file, schemas_jsonl;
  int64_t samples = 1, seed = 1, max_tokens = 512;
  double end_probability = 0.5;
  FlagSet flags("tessera constrain", kSummary);
  flags.String("model", &model, "model folder or .gguf (its tokenizer)");
  flags.String("json-schema", &json_schema_file, "file holding a JSON Schema");
  flags.String("regex", &regex, "regular expression the whole output matches");
  flags.String("choice", &choice, "JSON array of strings, one of which is the output");
  flags.String("grammar", &grammar_file, "file holding a GBNF grammar (start symbol root)");
  flags.String("schemas-jsonl", &schemas_jsonl, "file of constraints, one JSON object per line");
  flags.Int("samples", &samples, "outputs drawn per constraint");
  flags.Int("seed", &seed, "random seed");
  flags.Int("max-tokens", &max_tokens, "tokens per output at most");
  flags.Float("end-probability", &end_probability, "chance of ending where the grammar may end");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::printf("%s", flags.Usage().c_str());
    return 0;
  }
  if (model.empty()) {
    std::fprintf(stderr, "constrain needs --model\n\n%s", flags.Usage().c_str());
    return 2;
  }
  std::vector<Json> inputs;
  if (!schemas_jsonl.empty()) {
    std::ifstream in(schemas_jsonl);
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", schemas_jsonl.c_str());
      return 1;
    }
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      Json j = Json::parse(line, nullptr, false);
      if (j.is_discarded()) {
        std::fprintf(stderr, "%s: a line is not JSON\n", schemas_jsonl.c_str());
        return 1;
      }
      inputs.push_back(std::move(j));
    }
  } else if (!json_schema_file.empty()) {
    auto text = ReadFile(json_schema_file);
    if (!text.ok()) {
      std::fprintf(stderr, "%s\n", std::string(text.status().message()).c_str());
      return 1;
    }
    inputs.push_back(Json{{"json_schema", *text}});
  } else if (!regex.empty()) {
    inputs.push_back(Json{{"regex", regex}});
  } else if (!choice.empty()) {
    Json list = Json::parse(choice, nullptr, false);
    if (!list.is_array()) {
      std::fprintf(stderr, "--choice must be a JSON array of strings\n");
      return 2;
    }
    inputs.push_back(Json{{"choice", list}});
  } else if (!grammar_file.empty()) {
    auto text = ReadFile(grammar_file);
    if (!text.ok()) {
      std::fprintf(stderr, "%s\n", std::string(text.status().message()).c_str());
      return 1;
    }
    inputs.push_back(Json{{"grammar", *text}});
  } else {
    std::fprintf(stderr, "constrain needs a constraint\n\n%s", flags.Usage().c_str());
    return 2;
  }

  const auto load_start = Clock::now();
  auto tokenizer = Tokenizer::Load(model);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tokenizer.status().message()).c_str());
    return 1;
  }
  const double tokenizer_ms = Ms(load_start);
  const auto vocab_start = Clock::now();
  std::vector<int32_t> specials = SpecialTokenIds(**tokenizer);
  auto vocabulary = structured::TokenVocabulary::Build(TokenByteStrings(**tokenizer), specials);
  const double vocabulary_ms = Ms(vocab_start);
  const std::vector<int32_t> end_ids = {(*tokenizer)->eos_id()};

  std::mt19937_64 rng(static_cast<uint64_t>(seed));
  Totals totals;
  for (size_t index = 0; index < inputs.size(); ++index) {
    ++totals.constraints;
    auto constraint = ConstraintFromJson(inputs[index]);
    auto start = Clock::now();
    absl::StatusOr<std::string> gbnf =
        constraint.ok() ? structured::ConstraintToGbnf(*constraint)
                        : absl::StatusOr<std::string>(constraint.status());
    const double gbnf_ms = Ms(start);
    start = Clock::now();
    absl::StatusOr<std::shared_ptr<const structured::Grammar>> grammar =
        gbnf.ok() ? structured::Grammar::FromGbnf(*gbnf)
                  : absl::StatusOr<std::shared_ptr<const structured::Grammar>>(gbnf.status());
    const double compile_ms = Ms(start);
    if (!grammar.ok()) {
      ++totals.refused;
      std::cout << Json{{"index", index}, {"error", std::string(grammar.status().message())}}.dump()
                << "\n";
      continue;
    }
    auto tg = std::make_shared<structured::TokenGrammar>(*grammar, vocabulary);
    start = Clock::now();
    auto matcher0 = structured::GrammarMatcher::Create(tg, end_ids);
    absl::Status first = matcher0.status();
    if (first.ok()) first = tg->Mask(matcher0->state()).status();
    const double first_mask_ms = Ms(start);
    totals.gbnf_ms += gbnf_ms;
    totals.compile_ms += compile_ms;
    totals.first_mask_ms += first_mask_ms;
    totals.max_compile_ms = std::max(totals.max_compile_ms, gbnf_ms + compile_ms);
    if (!first.ok()) {
      ++totals.refused;
      std::cout << Json{{"index", index}, {"error", std::string(first.message())}}.dump() << "\n";
      continue;
    }
    const auto sample_start = Clock::now();
    for (int k = 0; k < samples; ++k) {
      auto matcher = structured::GrammarMatcher::Create(tg, end_ids);
      std::string text;
      bool complete = false;
      int tokens = 0;
      std::string error;
      for (; tokens < max_tokens; ++tokens) {
        const auto state = matcher->state();
        const bool accepting = tg->automaton().IsAccepting(state);
        auto mask = tg->Mask(state);
        if (!mask.ok()) {
          error = std::string(mask.status().message());
          break;
        }
        if (accepting && ((*mask)->num_allowed == 0 ||
                          std::uniform_real_distribution<double>(0, 1)(rng) < end_probability)) {
          complete = true;
          break;
        }
        if ((*mask)->num_allowed == 0) {
          error = "no token of the vocabulary continues the grammar";
          break;
        }
        int32_t pick = static_cast<int32_t>(rng() % (*mask)->num_allowed);
        int32_t id = 0;
        for (size_t w = 0; w < (*mask)->words.size(); ++w) {
          const int c = __builtin_popcountll((*mask)->words[w]);
          if (pick >= c) {
            pick -= c;
            continue;
          }
          uint64_t bits = (*mask)->words[w];
          for (int skip = 0; skip < pick; ++skip) bits &= bits - 1;
          id = static_cast<int32_t>(w * 64 + __builtin_ctzll(bits));
          break;
        }
        if (absl::Status s = matcher->Accept(id); !s.ok()) {
          error = std::string(s.message());
          break;
        }
        text += vocabulary->bytes(id);
      }
      ++totals.samples;
      totals.complete += complete;
      totals.tokens += tokens;
      Json out{{"index", index}, {"sample", k}, {"text", text}, {"complete", complete},
               {"tokens", tokens}};
      if (!error.empty()) out["error"] = error;
      // Random draws can split a character across tokens that never complete it.
      std::cout << out.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
    }
    totals.sample_ms += Ms(sample_start);
    totals.masks_computed += tg->stats().masks_computed;
    totals.masks_reused += tg->stats().masks_reused;
    totals.mask_seconds += tg->stats().mask_seconds;
    totals.automaton_states += tg->automaton().num_states();
  }
  const double n = std::max(1, totals.constraints - totals.refused);
  Json summary{
      {"vocab_size", vocabulary->size()},
      {"trie_nodes", vocabulary->num_nodes()},
      {"tokenizer_load_ms", tokenizer_ms},
      {"vocabulary_build_ms", vocabulary_ms},
      {"constraints", totals.constraints},
      {"refused", totals.refused},
      {"samples", totals.samples},
      {"complete", totals.complete},
      {"tokens", totals.tokens},
      {"mean_to_gbnf_ms", totals.gbnf_ms / n},
      {"mean_grammar_compile_ms", totals.compile_ms / n},
      {"max_compile_ms", totals.max_compile_ms},
      {"mean_first_mask_ms", totals.first_mask_ms / n},
      {"masks_computed", totals.masks_computed},
      {"masks_reused", totals.masks_reused},
      {"mean_mask_compute_us",
       totals.masks_computed ? 1e6 * totals.mask_seconds / totals.masks_computed : 0.0},
      {"automaton_states", totals.automaton_states},
      {"sampling_ms", totals.sample_ms},
      {"mean_us_per_token", totals.tokens ? 1e3 * totals.sample_ms / totals.tokens : 0.0},
  };
  std::cout << Json{{"summary", summary}}.dump() << "\n";
  return 0;
}

}  // namespace tessera::cli
