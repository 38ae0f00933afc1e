#ifndef TESSERA_COMMON_PRE_TOKENIZER_PATTERNS_H_
#define TESSERA_COMMON_PRE_TOKENIZER_PATTERNS_H_

#include "nlohmann/json.hpp"

// The Split regexes of real byte-level tokenizers, as their tokenizer.json files spell
// them: the synthetic tokenizers of gen-checkpoint and the tokenizers rebuilt from GGUF
// metadata use the same strings.
namespace tessera {

inline constexpr char kLlama3PreTokenizerPattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
inline constexpr char kQwen2PreTokenizerPattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// tokenizer.json's pre_tokenizer of such a tokenizer: Split(pattern, Isolated), then
// ByteLevel without its own regex.
inline nlohmann::json SplitByteLevelPreTokenizer(const char* pattern, bool trim_offsets) {
  using Json = nlohmann::json;
  return Json{{"type", "Sequence"},
              {"pretokenizers",
               Json::array({Json{{"type", "Split"},
                                 {"pattern", {{"Regex", pattern}}},
                                 {"behavior", "Isolated"},
                                 {"invert", false}},
                            Json{{"type", "ByteLevel"},
                                 {"add_prefix_space", false},
                                 {"trim_offsets", trim_offsets},
                                 {"use_regex", false}}})}};
}

}  // namespace tessera

#endif  // TESSERA_COMMON_PRE_TOKENIZER_PATTERNS_H_
