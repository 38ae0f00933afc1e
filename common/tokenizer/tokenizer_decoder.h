#ifndef TESSERA_COMMON_TOKENIZER_TOKENIZER_DECODER_H_
#define TESSERA_COMMON_TOKENIZER_TOKENIZER_DECODER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json_fwd.hpp"

namespace tessera {

// The `decoder` of a Hugging Face tokenizer.json: a chain of steps that turns the pieces
// of the ids being decoded into text. Supported steps are the ones SentencePiece-style
// tokenizers use: Replace (literal pattern), ByteFallback, Fuse, Strip and Metaspace.
class TokenDecoder {
 public:
  // `decoder` may be null (pieces are concatenated as they are); `source` names the file.
  static absl::StatusOr<TokenDecoder> FromJson(const nlohmann::json& decoder,
                                               absl::string_view source);

  // Unlike Hugging Face, byte pieces that do not form valid UTF-8 are kept as raw bytes
  // rather than replaced with U+FFFD, so a caller decoding a growing prefix can wait for
  // the rest of a character.
  std::string Decode(std::vector<std::string> pieces) const;

 private:
  enum class Kind { kReplace, kByteFallback, kFuse, kStrip, kMetaspace };
  struct Step {
    Kind kind;
    std::string from;  // kReplace: pattern; kStrip: the character; kMetaspace: replacement.
    std::string to;    // kReplace: replacement.
    int start = 0;     // kStrip: characters to strip at the start of each piece.
    int stop = 0;      // kStrip: ... and at the end.
    bool strip_first_space = false;  // kMetaspace: drop the first piece's leading space.
  };
  static absl::Status AddSteps(const nlohmann::json& decoder, absl::string_view source,
                               std::vector<Step>* steps);

  std::vector<Step> steps_;
};

}  // namespace tessera

#endif  // TESSERA_COMMON_TOKENIZER_TOKENIZER_DECODER_H_
