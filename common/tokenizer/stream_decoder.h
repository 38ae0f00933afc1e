#ifndef TESSERA_COMMON_TOKENIZER_STREAM_DECODER_H_
#define TESSERA_COMMON_TOKENIZER_STREAM_DECODER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"

namespace tessera {

// Turns ids arriving one at a time into text deltas that are each valid UTF-8 and that
// concatenate to Decode(all ids). A byte-level token can end inside a character (an emoji
// is often two or three tokens); its bytes are held until the character is complete.
// Only a short window of recent ids is re-decoded per id, keeping the SentencePiece rule
// that the first token drops its leading space, as vLLM's incremental detokenizer does.
class StreamDecoder {
 public:
  // `tokenizer` must outlive this object.
  explicit StreamDecoder(const Tokenizer* tokenizer, bool skip_special_tokens = true)
      : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

  // The text that `id` completes; empty while a character is still incomplete.
  std::string Append(int32_t id);
  // Whatever is still held at the end of the stream (bytes of a character that never
  // completed, as U+FFFD).
  std::string Finish();

 private:
  std::string DecodeRange(size_t begin, size_t end) const;

  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0;  // Start of the window re-decoded for context.
  size_t read_offset_ = 0;    // Ids before this have been released as text.
};

// `text` with each byte sequence that is not valid UTF-8 replaced by U+FFFD.
std::string ReplaceInvalidUtf8(const std::string& text);

// True when `text` ends inside a multi-byte character that later bytes could complete.
bool EndsInsideCharacter(const std::string& text);

}  // namespace tessera

#endif  // TESSERA_COMMON_TOKENIZER_STREAM_DECODER_H_
