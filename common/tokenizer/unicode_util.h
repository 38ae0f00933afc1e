#ifndef TESSERA_COMMON_TOKENIZER_UNICODE_UTIL_H_
#define TESSERA_COMMON_TOKENIZER_UNICODE_UTIL_H_

#include <cstddef>

#include "absl/strings/string_view.h"

namespace tessera {

// Byte length of the UTF-8 sequence starting at `text[pos]` (pos < text.size()), or 1 when
// the bytes there are not valid UTF-8 (stray continuation byte, truncated or overlong
// sequence, surrogate, value above U+10FFFF). Treating each bad byte as its own one-byte
// "character" lets tokenizers send it through byte fallback instead of failing.
size_t Utf8CharLength(absl::string_view text, size_t pos);

}  // namespace tessera

#endif  // TESSERA_COMMON_TOKENIZER_UNICODE_UTIL_H_
