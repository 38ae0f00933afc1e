#ifndef TESSERA_COMMON_CHAT_TEMPLATE_JINJA_TEXT_H_
#define TESSERA_COMMON_CHAT_TEMPLATE_JINJA_TEXT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"

// Python str semantics on UTF-8 text: Python counts, indexes and strips code points, and
// its whitespace is Unicode's, so templates that trim or slice content print what jinja2
// prints.
namespace tessera::jinja {

std::vector<char32_t> DecodeUtf8(absl::string_view s);  // Invalid bytes decode as U+FFFD.
std::string EncodeUtf8(const std::vector<char32_t>& code_points);
void AppendUtf8(char32_t c, std::string* out);
size_t CodePointCount(absl::string_view s);

bool IsPythonSpace(char32_t c);  // str.isspace()
// str.strip / lstrip / rstrip; `chars` unset strips whitespace.
std::string PyStrip(absl::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split(sep, maxsplit); sep unset splits on runs of whitespace.
std::vector<std::string> PySplit(absl::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::string PyReplace(absl::string_view s, absl::string_view old, absl::string_view replacement, int64_t count);
// Unicode case mapping: utf8proc's one-to-one mappings plus the common one-to-many ones
// Python applies (ß -> SS, ligatures, İ); rarer special cases (Greek, Armenian) differ.
std::string PyUpper(absl::string_view s);
std::string PyLower(absl::string_view s);
std::string PyTitle(absl::string_view s);
std::string PyCapitalize(absl::string_view s);

}  // namespace tessera::jinja

#endif  // TESSERA_COMMON_CHAT_TEMPLATE_JINJA_TEXT_H_
