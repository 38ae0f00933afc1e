#ifndef TESSERA_COMMON_TOKENIZER_BYTE_LEVEL_ALPHABET_H_
#define TESSERA_COMMON_TOKENIZER_BYTE_LEVEL_ALPHABET_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace tessera {

// GPT-2's byte-to-character table, which byte-level BPE vocabularies (GPT-2, Llama 3,
// Qwen2) are spelled in: printable Latin-1 bytes stand for themselves and the other 68
// bytes (controls, space, 0x7F-0xA0, 0xAD) for U+0100.. in byte order, so that every piece
// is printable text without spaces ("Ġthe" is " the").
class ByteLevelAlphabet {
 public:
  static const ByteLevelAlphabet& Get();

  // The UTF-8 spelling (1 or 2 bytes) of the character that byte `b` stands for.
  absl::string_view CharForByte(uint8_t b) const { return chars_[b]; }
  // The code point that byte `b` stands for.
  uint32_t CodePointForByte(uint8_t b) const { return code_points_[b]; }

  // Appends the byte-level spelling of the raw bytes `bytes`.
  void Encode(absl::string_view bytes, std::string* out) const;
  // Appends the raw bytes that the byte-level `piece` spells; false (and `out` partly
  // written) when the piece holds a character outside the alphabet.
  bool Decode(absl::string_view piece, std::string* out) const;

 private:
  ByteLevelAlphabet();

  std::array<uint32_t, 256> code_points_;
  std::array<std::string, 256> chars_;
  // Inverse table: the byte of each code point below 0x144 (the largest one used), or -1.
  std::array<int16_t, 0x144> byte_of_code_point_;
};

}  // namespace tessera

#endif  // TESSERA_COMMON_TOKENIZER_BYTE_LEVEL_ALPHABET_H_
