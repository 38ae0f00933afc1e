#ifndef TESSERA_COMMON_TOKENIZER_REGEX_H_
#define TESSERA_COMMON_TOKENIZER_REGEX_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera {

// A PCRE2 pattern compiled for pre-tokenizing: UTF with Unicode properties (\p{L}, and \s,
// \w, \d mean their Unicode classes), JIT-compiled, and tolerant of invalid UTF-8 in the
// subject. PCRE2 rather than RE2 because the GPT-2 / Llama 3 patterns need the lookahead
// `\s+(?!\S)`. Matching is thread-safe.
class Regex {
 public:
  // `pattern` is in the Oniguruma / Rust-regex dialect that tokenizer.json files use;
  // `\s` (anywhere) and `\S` (outside a character class) are widened to Unicode
  // White_Space, as PCRE2's `\s` leaves out U+0085.
  static absl::StatusOr<Regex> Compile(absl::string_view pattern);

  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  ~Regex();

  // Calls `on_match(start, end)` for each non-overlapping match in `text`, left to right.
  // An empty match moves the search on by one character. Returns an error only when the
  // engine fails (for example a match that exhausts its stack).
  absl::Status ForEachMatch(absl::string_view text,
                            absl::FunctionRef<void(size_t, size_t)> on_match) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  Regex(std::string pattern, std::unique_ptr<Code> code);

  std::string pattern_;
  std::unique_ptr<Code> code_;
};

// The pattern with `\s` / `\S` widened to Unicode White_Space (exposed for tests).
std::string WidenWhitespaceClasses(absl::string_view pattern);

}  // namespace tessera

#endif  // TESSERA_COMMON_TOKENIZER_REGEX_H_
