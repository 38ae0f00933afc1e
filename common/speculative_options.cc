#include "common/speculative_options.h"

#include "absl/strings/str_cat.h"

namespace tessera {

void AddSpeculativeFlags(FlagSet& flags, SpeculativeOptions* o) {
  flags.String("speculative", &o->method,
               "Speculative decoding: none, ngram (prompt lookup: the tokens that followed the latest "
               "earlier occurrence of the last n tokens) or draft (a smaller model, --draft-model). The "
               "target verifies the proposals in the same step; greedy output is unchanged and sampled "
               "output keeps its distribution.");
  flags.Int("num-speculative-tokens", &o->num_tokens,
            "Tokens proposed per decoding sequence and step (--speculative); each costs a slot of the "
            "token budget and of the KV cache.");
  flags.String("draft-model", &o->draft_model,
               "--speculative=draft: model folder of the draft (same tokenizer as --model; sharded over "
               "the same tp ranks, so its heads must divide by --tp).");
  flags.Int("prompt-lookup-min", &o->prompt_lookup_min, "--speculative=ngram: shortest suffix matched.");
  flags.Int("prompt-lookup-max", &o->prompt_lookup_max, "--speculative=ngram: longest suffix matched.");
}

absl::Status ValidateSpeculativeOptions(const SpeculativeOptions& o) {
  if (o.method != "none" && o.method != "ngram" && o.method != "draft") {
    return absl::InvalidArgumentError(
        absl::StrCat("--speculative must be none, ngram or draft, got ", o.method));
  }
  if (!o.enabled()) {
    if (!o.draft_model.empty()) {
      return absl::InvalidArgumentError("--draft-model is only used with --speculative=draft");
    }
    return absl::OkStatus();
  }
  if (o.num_tokens < 1 || o.num_tokens > 15) {
    return absl::InvalidArgumentError(
        absl::StrCat("--num-speculative-tokens must be in [1, 15], got ", o.num_tokens));
  }
  if (o.method == "ngram" && (o.prompt_lookup_min < 1 || o.prompt_lookup_max < o.prompt_lookup_min)) {
    return absl::InvalidArgumentError(
        absl::StrCat("need 1 <= --prompt-lookup-min (", o.prompt_lookup_min, ") <= --prompt-lookup-max (",
                     o.prompt_lookup_max, ")"));
  }
  if (o.method == "draft" && o.draft_model.empty()) {
    return absl::InvalidArgumentError("--speculative=draft needs --draft-model");
  }
  if (o.method != "draft" && !o.draft_model.empty()) {
    return absl::InvalidArgumentError("--draft-model is only used with --speculative=draft");
  }
  return absl::OkStatus();
}

std::vector<std::string> SpeculativeFlagArgs(const SpeculativeOptions& o) {
  if (!o.enabled()) return {};
  std::vector<std::string> args = {absl::StrCat("--speculative=", o.method),
                                   absl::StrCat("--num-speculative-tokens=", o.num_tokens),
                                   absl::StrCat("--prompt-lookup-min=", o.prompt_lookup_min),
                                   absl::StrCat("--prompt-lookup-max=", o.prompt_lookup_max)};
  if (!o.draft_model.empty()) args.push_back(absl::StrCat("--draft-model=", o.draft_model));
  return args;
}

}  // namespace tessera
