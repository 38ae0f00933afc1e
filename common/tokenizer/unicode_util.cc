#include "common/tokenizer/unicode_util.h"

#include <cstdint>

namespace tessera {

size_t Utf8CharLength(absl::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t b0 = byte(pos);
  if (b0 < 0x80) return 1;
  size_t len;
  uint32_t min_value;
  uint32_t value;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, min_value = 0x80, value = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, min_value = 0x800, value = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, min_value = 0x10000, value = b0 & 0x07;
  } else {
    return 1;  // Continuation byte or 0xF8..0xFF: never a valid lead byte.
  }
  if (pos + len > text.size()) return 1;
  for (size_t i = 1; i < len; ++i) {
    const uint8_t b = byte(pos + i);
    if ((b & 0xC0) != 0x80) return 1;
    value = (value << 6) | (b & 0x3F);
  }
  if (value < min_value || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) return 1;
  return len;
}

}  // namespace tessera
