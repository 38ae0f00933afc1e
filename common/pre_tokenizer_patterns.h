#ifndef TESSERA_COMMON_PRE_TOKENIZER_PATTERNS_H_
#define TESSERA_COMMON_PRE_TOKENIZER_PATTERNS_H_

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

}  // namespace tessera

#endif  // TESSERA_COMMON_PRE_TOKENIZER_PATTERNS_H_
