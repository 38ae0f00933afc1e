#include "common/tokenizer/token_bytes.h"

#include <cctype>

namespace tessera {

std::vector<std::string> TokenByteStrings(const Tokenizer& tokenizer) {
  const int32_t n = tokenizer.vocab_size();
  // Decoding after a plain anchor token shows a token as it is mid-text: decoders that
  // drop the first piece's leading space (SentencePiece) drop it from the anchor only.
  // Any ordinary single-character token serves (small SentencePiece vocabularies spell
  // "a" as "▁" + "a", so the encoder is no help finding one).
  int32_t anchor = -1;
  for (int32_t id = 0; id < n && anchor < 0; ++id) {
    if (tokenizer.IsSpecial(id)) continue;
    const std::string text = tokenizer.Decode({id}, false);
    if (text.size() == 1 && std::isalnum(static_cast<unsigned char>(text[0]))) anchor = id;
  }
  std::vector<std::string> bytes(n);
  const std::string prefix = anchor >= 0 ? tokenizer.Decode({anchor}, false) : std::string();
  for (int32_t id = 0; id < n; ++id) {
    if (anchor < 0) {
      bytes[id] = tokenizer.Decode({id}, false);
      continue;
    }
    std::string text = tokenizer.Decode({anchor, id}, false);
    if (text.compare(0, prefix.size(), prefix) == 0) {
      bytes[id] = text.substr(prefix.size());
    } else {
      bytes[id] = tokenizer.Decode({id}, false);
    }
  }
  return bytes;
}

std::vector<int32_t> SpecialTokenIds(const Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (tokenizer.IsSpecial(id)) ids.push_back(id);
  }
  return ids;
}

}  // namespace tessera
