#ifndef TESSERA_COMMON_ROPE_H_
#define TESSERA_COMMON_ROPE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json_fwd.hpp"

namespace tessera {

// config.json's "rope_scaling": how the RoPE frequencies are rescaled for long context.
// The formulas are those of Hugging Face transformers' modeling_rope_utils.py.
struct RopeScaling {
  enum class Type { kDefault, kLinear, kDynamic, kLlama3, kYarn };
  Type type = Type::kDefault;
  double factor = 1.0;               // linear, dynamic, llama3, yarn
  double low_freq_factor = 1.0;      // llama3
  double high_freq_factor = 4.0;     // llama3
  // llama3 (required) and yarn (0: the config's max_position_embeddings).
  int original_max_position_embeddings = 0;
  double beta_fast = 32.0;           // yarn
  double beta_slow = 1.0;            // yarn
  double mscale = 0.0;               // yarn; 0 = absent
  double mscale_all_dim = 0.0;       // yarn; 0 = absent
  double attention_factor = 0.0;     // yarn; 0 = absent (derived from factor and mscale)
  bool truncate = true;              // yarn: round the correction range outwards

  // Parses the "rope_scaling" object (null or absent: kDefault). `source` names the file.
  static absl::StatusOr<RopeScaling> FromJson(const nlohmann::json& j, absl::string_view source);
  // The JSON object a Hugging Face config holds (null for kDefault).
  nlohmann::json ToJson() const;
  std::string TypeName() const;
};

// What the rotary embedding needs, computed once per model on the host.
struct RopeFrequencies {
  std::vector<float> inv_freq;     // [head_dim / 2]: angle of pair i = position * inv_freq[i]
  float attention_scaling = 1.0f;  // cos and sin are multiplied by it (yarn's mscale)
};

// Frequencies for rotary dimension `head_dim` (even) and base `theta`. Computed in double
// and rounded once to float32; the angle pos * inv_freq[i] is then formed in float32 by
// every backend, as transformers does.
//
// "yarn" uses `factor` as given everywhere (as current transformers does; some earlier
// releases replaced it by max_position_embeddings / original_max_position_embeddings,
// which turns Qwen2.5's published yarn config into no scaling at all).
//
// "dynamic" (NTK) is applied statically, as vLLM does: the base is rescaled once for a
// context of max_position_embeddings * factor. transformers instead recomputes the base
// from the current sequence length at every forward call, which would change the rotation
// of keys already in the KV cache; short sequences therefore differ from transformers'.
RopeFrequencies ComputeRopeFrequencies(const RopeScaling& scaling, int head_dim, double theta,
                                       int max_position_embeddings);

}  // namespace tessera

#endif  // TESSERA_COMMON_ROPE_H_
