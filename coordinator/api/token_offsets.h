#ifndef TESSERA_COORDINATOR_API_TOKEN_OFFSETS_H_
#define TESSERA_COORDINATOR_API_TOKEN_OFFSETS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"

namespace tessera {

// Token ids laid over the text they decode to. A token decoded alone loses what depends
// on its neighbours (SentencePiece drops the word-boundary space of a first piece; a
// byte-fallback token is a fraction of a character), so single-token decodes do not
// concatenate back to the text. Here each token owns the bytes it adds to the decode of
// everything before it: `text` = Decode(ids) (special tokens skipped), and token i spans
// text[offsets[i], offsets[i + 1]) (the last one to the end). Special tokens span nothing.
struct TokenOffsets {
  std::string text;
  std::vector<uint32_t> offsets;
};

TokenOffsets ComputeTokenOffsets(const Tokenizer& tokenizer, const std::vector<int32_t>& ids);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_API_TOKEN_OFFSETS_H_
