#include "common/tokenizer/token_bytes.h"

namespace tessera {

std::vector<std::string> TokenByteStrings(const Tokenizer& tokenizer) {
  const int32_t n = tokenizer.vocab_size();
  // Decoding after a plain anchor token shows a token as it is mid-text: decoders that
  // drop the first piece's leading space (SentencePiece) drop it from the anchor only.
  int32_t anchor = -1;
  for (const char* piece : {"a", "e", "t"}) {
    const std::vector<int32_t> ids = tokenizer.Encode(piece, /*add_special_tokens=*/false);
    if (ids.size() == 1) {
      anchor = ids[0];
      break;
    }
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
