#ifndef TESSERA_COMMON_BYTE_LEVEL_TOKENIZER_PARTS_H_
#define TESSERA_COMMON_BYTE_LEVEL_TOKENIZER_PARTS_H_

#include <utility>

#include "nlohmann/json.hpp"

// Parts of a byte-level BPE tokenizer.json as the real files spell them (the Split regexes
// of Llama 3 and Qwen2, the ByteLevel steps, the BPE model): the synthetic tokenizers of
// gen-checkpoint and the tokenizers rebuilt from GGUF metadata are built from the same.
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

// The ByteLevel decoder and post-processor of GPT-2 style files.
inline nlohmann::json ByteLevelDecoder() {
  return {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
}
inline nlohmann::json ByteLevelPostProcessor() {
  return {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}};
}

// The `model` object: BPE over `vocab` ({piece: id}) and `merges` ([[left, right], ...]).
inline nlohmann::json ByteLevelBpeModel(nlohmann::json vocab, nlohmann::json merges, bool ignore_merges) {
  return {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", nullptr},
          {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr},
          {"fuse_unk", false},
          {"byte_fallback", false},
          {"ignore_merges", ignore_merges},
          {"vocab", std::move(vocab)},
          {"merges", std::move(merges)}};
}

}  // namespace tessera

#endif  // TESSERA_COMMON_BYTE_LEVEL_TOKENIZER_PARTS_H_
