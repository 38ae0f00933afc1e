#include "common/structured/utf8_ranges.h"

namespace tessera::structured {
namespace {

constexpr uint32_t kMaxLength[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};

int EncodedLength(uint32_t cp) {
  for (int n = 0; n < 4; ++n) {
    if (cp <= kMaxLength[n]) return n + 1;
  }
  return 4;
}

void Split(uint32_t lo, uint32_t hi, std::vector<std::vector<ByteRange>>* out) {
  if (lo > hi) return;
  // Surrogates are not characters.
  if (lo < 0xD800 && hi >= 0xD800) {
    Split(lo, 0xD7FF, out);
    Split(0xE000, hi, out);
    return;
  }
  if (lo >= 0xD800 && lo <= 0xDFFF) {
    if (hi <= 0xDFFF) return;
    Split(0xE000, hi, out);
    return;
  }
  // One encoded length at a time.
  const int n = EncodedLength(lo);
  if (hi > kMaxLength[n - 1]) {
    Split(lo, kMaxLength[n - 1], out);
    Split(kMaxLength[n - 1] + 1, hi, out);
    return;
  }
  // Split until every trailing byte spans its full continuation range where the leading
  // bytes differ, so the range is a product of per-byte ranges.
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        Split(lo, lo | m, out);
        Split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        Split(lo, (hi & ~m) - 1, out);
        Split(hi & ~m, hi, out);
        return;
      }
    }
  }
  const std::string a = EncodeUtf8(lo);
  const std::string b = EncodeUtf8(hi);
  std::vector<ByteRange> seq;
  for (size_t k = 0; k < a.size(); ++k) {
    seq.push_back({static_cast<uint8_t>(a[k]), static_cast<uint8_t>(b[k])});
  }
  out->push_back(std::move(seq));
}

}  // namespace

std::string EncodeUtf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

std::vector<std::vector<ByteRange>> Utf8Sequences(uint32_t lo, uint32_t hi) {
  std::vector<std::vector<ByteRange>> out;
  if (hi > 0x10FFFF) hi = 0x10FFFF;
  Split(lo, hi, &out);
  return out;
}

}  // namespace tessera::structured
