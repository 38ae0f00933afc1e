#include "common/chat_template/jinja_text.h"

#include <utf8proc.h>

#include "absl/strings/str_cat.h"

namespace tessera::jinja {

std::vector<char32_t> DecodeUtf8(absl::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(s.size());
  while (left > 0) {
    utf8proc_int32_t c;
    utf8proc_ssize_t n = utf8proc_iterate(p, left, &c);
    if (n <= 0) {
      out.push_back(0xFFFD);
      n = 1;
    } else {
      out.push_back(static_cast<char32_t>(c));
    }
    p += n;
    left -= n;
  }
  return out;
}

void AppendUtf8(char32_t c, std::string* out) {
  utf8proc_uint8_t buf[4];
  utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buf);
  out->append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

std::string EncodeUtf8(const std::vector<char32_t>& code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (char32_t c : code_points) AppendUtf8(c, &out);
  return out;
}

size_t CodePointCount(absl::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) {
    if ((c & 0xC0) != 0x80) ++n;
  }
  return n;
}

bool IsPythonSpace(char32_t c) {
  switch (c) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x1C: case 0x1D: case 0x1E: case 0x1F:
    case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

std::string PyStrip(absl::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::vector<char32_t> cps = DecodeUtf8(s);
  std::vector<char32_t> strip_set;
  if (chars.has_value()) strip_set = DecodeUtf8(*chars);
  auto strip = [&](char32_t c) {
    if (!chars.has_value()) return IsPythonSpace(c);
    for (char32_t x : strip_set) {
      if (x == c) return true;
    }
    return false;
  };
  size_t begin = 0, end = cps.size();
  if (left) {
    while (begin < end && strip(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strip(cps[end - 1])) --end;
  }
  return EncodeUtf8(std::vector<char32_t>(cps.begin() + begin, cps.begin() + end));
}

std::vector<std::string> PySplit(absl::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep.has_value()) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t next = s.find(*sep, pos);
      if (next == absl::string_view::npos) break;
      out.emplace_back(s.substr(pos, next - pos));
      pos = next + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  std::vector<char32_t> cps = DecodeUtf8(s);
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && IsPythonSpace(cps[i])) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      size_t end = cps.size();
      while (end > i && IsPythonSpace(cps[end - 1])) --end;
      out.push_back(EncodeUtf8(std::vector<char32_t>(cps.begin() + i, cps.begin() + end)));
      break;
    }
    size_t j = i;
    while (j < cps.size() && !IsPythonSpace(cps[j])) ++j;
    out.push_back(EncodeUtf8(std::vector<char32_t>(cps.begin() + i, cps.begin() + j)));
    i = j;
  }
  return out;
}

std::string PyReplace(absl::string_view s, absl::string_view old, absl::string_view replacement, int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts the replacement around every code point.
    std::vector<char32_t> cps = DecodeUtf8(s);
    int64_t done = 0;
    for (char32_t c : cps) {
      if (count < 0 || done < count) {
        absl::StrAppend(&out, replacement);
        ++done;
      }
      AppendUtf8(c, &out);
    }
    if (count < 0 || done < count) absl::StrAppend(&out, replacement);
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t next = s.find(old, pos);
    if (next == absl::string_view::npos) break;
    absl::StrAppend(&out, s.substr(pos, next - pos));
    absl::StrAppend(&out, replacement);
    pos = next + old.size();
    ++done;
  }
  absl::StrAppend(&out, s.substr(pos));
  return out;
}

namespace {

bool IsCased(char32_t c) {
  const utf8proc_category_t cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

char32_t Upper(char32_t c) { return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))); }
char32_t Lower(char32_t c) { return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))); }
char32_t Title(char32_t c) { return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c))); }

// Python applies Unicode's SpecialCasing, where one letter maps to several; utf8proc has
// only the one-to-one mappings. The common ones: ß and the Latin ligatures, and İ.
enum class Case { kUpper, kLower, kTitle };
bool AppendSpecialCase(char32_t c, Case to, std::string* out) {
  struct Special {
    char32_t c;
    const char* upper;
    const char* title;
  };
  static constexpr Special kSpecial[] = {
      {0x00DF, "SS", "Ss"},   {0xFB00, "FF", "Ff"},   {0xFB01, "FI", "Fi"},  {0xFB02, "FL", "Fl"},
      {0xFB03, "FFI", "Ffi"}, {0xFB04, "FFL", "Ffl"}, {0xFB05, "ST", "St"},  {0xFB06, "ST", "St"},
  };
  if (to == Case::kLower) {
    if (c != 0x0130) return false;
    *out += "i\xCC\x87";  // U+0069 U+0307
    return true;
  }
  for (const Special& s : kSpecial) {
    if (s.c == c) {
      *out += to == Case::kUpper ? s.upper : s.title;
      return true;
    }
  }
  return false;
}

void AppendCased(char32_t c, Case to, std::string* out) {
  if (AppendSpecialCase(c, to, out)) return;
  AppendUtf8(to == Case::kUpper ? Upper(c) : to == Case::kLower ? Lower(c) : Title(c), out);
}

std::string MapCase(absl::string_view s, Case to) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : DecodeUtf8(s)) AppendCased(c, to, &out);
  return out;
}

}  // namespace

std::string PyUpper(absl::string_view s) { return MapCase(s, Case::kUpper); }
std::string PyLower(absl::string_view s) { return MapCase(s, Case::kLower); }

std::string PyTitle(absl::string_view s) {
  std::string out;
  bool previous_cased = false;
  for (char32_t c : DecodeUtf8(s)) {
    AppendCased(c, previous_cased ? Case::kLower : Case::kTitle, &out);
    previous_cased = IsCased(c);
  }
  return out;
}

std::string PyCapitalize(absl::string_view s) {
  std::string out;
  bool first = true;
  for (char32_t c : DecodeUtf8(s)) {
    AppendCased(c, first ? Case::kTitle : Case::kLower, &out);
    first = false;
  }
  return out;
}

}  // namespace tessera::jinja
