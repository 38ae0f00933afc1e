#ifndef TESSERA_COMMON_STRUCTURED_UTF8_RANGES_H_
#define TESSERA_COMMON_STRUCTURED_UTF8_RANGES_H_

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::structured {

struct ByteRange {
  uint8_t lo;
  uint8_t hi;
};

// The UTF-8 encodings of the code points in [lo, hi] (surrogates D800-DFFF excluded) as
// sequences of byte ranges: every code point in the range is exactly one sequence's
// bytes, one byte from each range. E.g. [U+0000, U+07FF] is {[00-7F]} and
// {[C2-DF][80-BF]}.
std::vector<std::vector<ByteRange>> Utf8Sequences(uint32_t lo, uint32_t hi);

// `cp` as UTF-8 (cp <= 0x10FFFF).
std::string EncodeUtf8(uint32_t cp);

}  // namespace tessera::structured

#endif  // TESSERA_COMMON_STRUCTURED_UTF8_RANGES_H_
