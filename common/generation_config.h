#ifndef TESSERA_COMMON_GENERATION_CONFIG_H_
#define TESSERA_COMMON_GENERATION_CONFIG_H_

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model_config.h"
#include "common/sampling_params.h"

namespace tessera {

// The model author's generation defaults from Hugging Face `generation_config.json`:
// what generation stops on (Llama 3 instruct ends a turn on <|eot_id|> or <|eom_id|>,
// neither of which is config.json's single eos on older exports) and the sampling a
// request gets for every field it leaves unset, as vLLM and TGI apply them.
struct GenerationConfig {
  std::vector<int32_t> eos_token_ids;  // Empty when the file names none.
  std::optional<int32_t> bos_token_id;
  std::optional<bool> do_sample;  // false: greedy unless a request sets a temperature.
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int> top_k;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
  std::optional<int> max_new_tokens;

  // Parses generation_config.json text; `source` names the file in error messages.
  static absl::StatusOr<GenerationConfig> FromJson(absl::string_view json,
                                                   absl::string_view source);
  // Reads `<model_dir>/generation_config.json`; a folder without one gives an empty config
  // (all of Tessera's own defaults apply). Ids outside `model`'s vocabulary are refused.
  static absl::StatusOr<GenerationConfig> LoadIfPresent(const std::filesystem::path& model_dir,
                                                        const ModelConfig& model);

  // Tessera's defaults with this file's values laid over them.
  SamplingParams DefaultSampling() const;

  // The ids that end generation: config.json's eos ids and this file's, in that order,
  // without repeats. Both count because exports disagree (Llama 3 instruct's config.json
  // may name <|end_of_text|> alone while its generation_config.json adds <|eot_id|>).
  std::vector<int32_t> StopTokenIds(const ModelConfig& model) const;
};

}  // namespace tessera

#endif  // TESSERA_COMMON_GENERATION_CONFIG_H_
