#ifndef TESSERA_TOOLS_CHECKPOINT_BYTE_LEVEL_TOKENIZER_JSON_H_
#define TESSERA_TOOLS_CHECKPOINT_BYTE_LEVEL_TOKENIZER_JSON_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera {

// Which real byte-level vocabulary a generated checkpoint imitates: the pre-tokenizer
// regex, the special tokens and their ids, and whether BOS is added follow that family.
enum class ByteLevelFlavor {
  kLlama3,  // Llama 3.x: <|begin_of_text|> = first special id, BOS added, eos <|eot_id|> etc.
  kQwen2,   // Qwen2/2.5: <|endoftext|>, <|im_start|>, <|im_end|>; no BOS.
  kQwen3,   // Qwen3: Qwen2.5's, then <tool_response>, </tool_response>, <think>, </think>.
};

// The files of a synthetic byte-level BPE tokenizer (GPT-2 byte alphabet, a deterministic
// set of merges filling the regular vocabulary, then the family's special tokens).
struct ByteLevelTokenizerFiles {
  std::string tokenizer_json;
  std::string tokenizer_config_json;
  int bos_token_id = -1;           // -1 when the family adds none.
  std::vector<int> eos_token_ids;  // What generation stops on (config/generation_config).
  int num_tokens = 0;              // Ids the tokenizer defines, specials included.
};

// `num_regular_tokens`: byte pieces + merged pieces (>= 256); the specials come after them,
// as in the real files (Llama 3: 128000 regular + 256 specials = 128256).
absl::StatusOr<ByteLevelTokenizerFiles> SyntheticByteLevelTokenizer(ByteLevelFlavor flavor,
                                                                   int num_regular_tokens);

}  // namespace tessera

#endif  // TESSERA_TOOLS_CHECKPOINT_BYTE_LEVEL_TOKENIZER_JSON_H_
