#include "common/tokenizer/byte_level_alphabet.h"

namespace tessera {
namespace {

// The bytes GPT-2 keeps as their own Latin-1 character: '!'..'~', '¡'..'¬', '®'..'ÿ'.
bool StandsForItself(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else {  // The alphabet stays below U+0800: two bytes at most.
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

const ByteLevelAlphabet& ByteLevelAlphabet::Get() {
  static const ByteLevelAlphabet* const kAlphabet = new ByteLevelAlphabet();
  return *kAlphabet;
}

ByteLevelAlphabet::ByteLevelAlphabet() {
  byte_of_code_point_.fill(-1);
  uint32_t next_shifted = 0x100;
  for (int b = 0; b < 256; ++b) {
    code_points_[b] = StandsForItself(b) ? static_cast<uint32_t>(b) : next_shifted++;
    AppendUtf8(code_points_[b], &chars_[b]);
    byte_of_code_point_[code_points_[b]] = static_cast<int16_t>(b);
  }
}

void ByteLevelAlphabet::Encode(absl::string_view bytes, std::string* out) const {
  for (char c : bytes) out->append(chars_[static_cast<uint8_t>(c)]);
}

bool ByteLevelAlphabet::Decode(absl::string_view piece, std::string* out) const {
  for (size_t i = 0; i < piece.size();) {
    const uint8_t lead = static_cast<uint8_t>(piece[i]);
    uint32_t cp;
    if (lead < 0x80) {
      cp = lead;
      i += 1;
    } else if ((lead & 0xE0) == 0xC0 && i + 1 < piece.size() &&
               (static_cast<uint8_t>(piece[i + 1]) & 0xC0) == 0x80) {
      cp = ((lead & 0x1F) << 6) | (static_cast<uint8_t>(piece[i + 1]) & 0x3F);
      i += 2;
    } else {
      return false;
    }
    if (cp >= byte_of_code_point_.size() || byte_of_code_point_[cp] < 0) return false;
    out->push_back(static_cast<char>(byte_of_code_point_[cp]));
  }
  return true;
}

}  // namespace tessera
