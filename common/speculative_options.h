#ifndef TESSERA_COMMON_SPECULATIVE_OPTIONS_H_
#define TESSERA_COMMON_SPECULATIVE_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/flag_set.h"

namespace tessera {

// Speculative decoding as a server is told to run it (--speculative and its companions);
// the coordinator turns it into lookahead slots and the workers' proposer.
struct SpeculativeOptions {
  std::string method = "none";  // none, ngram (prompt lookup) or draft.
  // Proposed per decoding sequence and step. 3: a verification step of 1 + 3 rows is one
  // pass of the CPU GEMM's 4-row kernel (about 1.2x a decode step on llama-1b; 1 + 4 rows
  // take a second pass, 1.4x: benchmarks/results/spec_decode_llama1b.md).
  int64_t num_tokens = 3;
  std::string draft_model;      // method draft: the draft model's folder.
  // ngram: suffix lengths tried, longest first (vLLM's defaults are the same range).
  int64_t prompt_lookup_min = 1;
  int64_t prompt_lookup_max = 4;

  bool enabled() const { return method != "none"; }
};

// Registers --speculative, --num-speculative-tokens, --draft-model, --prompt-lookup-min and
// --prompt-lookup-max.
void AddSpeculativeFlags(FlagSet& flags, SpeculativeOptions* options);

// INVALID_ARGUMENT naming the flag for an unknown method, a count outside [1, 15], lookup
// bounds out of order, or a draft model missing (method draft) or given without it.
absl::Status ValidateSpeculativeOptions(const SpeculativeOptions& options);

// The flags that reproduce `options` on another binary (none when disabled).
std::vector<std::string> SpeculativeFlagArgs(const SpeculativeOptions& options);

}  // namespace tessera

#endif  // TESSERA_COMMON_SPECULATIVE_OPTIONS_H_
