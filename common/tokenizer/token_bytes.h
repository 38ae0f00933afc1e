#ifndef TESSERA_COMMON_TOKENIZER_TOKEN_BYTES_H_
#define TESSERA_COMMON_TOKENIZER_TOKEN_BYTES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"

namespace tessera {

// Each token's bytes as they appear in the middle of generated text (index = id): what a
// grammar constraint matches tokens against. Byte-level pieces map back through the
// GPT-2 alphabet, SentencePiece ones keep their word-boundary space (only the first
// token of a text loses it), byte-fallback tokens are their single raw byte.
std::vector<std::string> TokenByteStrings(const Tokenizer& tokenizer);

// The ids that never belong to constrained text: BOS, EOS, unk and added tokens marked
// special.
std::vector<int32_t> SpecialTokenIds(const Tokenizer& tokenizer);

}  // namespace tessera

#endif  // TESSERA_COMMON_TOKENIZER_TOKEN_BYTES_H_
