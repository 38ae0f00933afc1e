#ifndef TESSERA_COMMON_TOKENIZER_TOKENIZER_SPECIALS_H_
#define TESSERA_COMMON_TOKENIZER_TOKENIZER_SPECIALS_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json_fwd.hpp"

namespace tessera {

// Which special ids a tokenizer adds around encoded text, and which ids are BOS and EOS.
struct SpecialTokenPlan {
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  std::vector<int32_t> prefix_ids;  // Added before the text when add_special_tokens.
  std::vector<int32_t> suffix_ids;  // ... and after it.
};

// Combines tokenizer.json's `post_processor` (TemplateProcessing, possibly inside a
// Sequence) with tokenizer_config.json (`config` may be null): add_bos_token /
// add_eos_token there override the template, as transformers' LlamaTokenizerFast does,
// and bos_token / eos_token name the ids. `id_for_piece` returns -1 for unknown pieces.
absl::StatusOr<SpecialTokenPlan> ResolveSpecialTokens(
    const nlohmann::json& tokenizer, const nlohmann::json& config,
    const std::function<int32_t(absl::string_view)>& id_for_piece,
    absl::string_view tokenizer_source, absl::string_view config_source);

}  // namespace tessera

#endif  // TESSERA_COMMON_TOKENIZER_TOKENIZER_SPECIALS_H_
