#include "common/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

std::string Pcre2Message(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof(buffer)) < 0) {
    return absl::StrCat("PCRE2 error ", code);
  }
  return std::string(reinterpret_cast<const char*>(buffer));
}

// Per-thread match state: a one-pair match block (only the whole match is needed) and a
// JIT stack big enough for long whitespace runs, which backtrack through `\s+(?!\S)`.
struct ThreadMatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;

  ThreadMatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
    if (context != nullptr && jit_stack != nullptr) {
      pcre2_jit_stack_assign(context, nullptr, jit_stack);
    }
  }
  ~ThreadMatchState() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

ThreadMatchState& MatchState() {
  thread_local ThreadMatchState state;
  return state;
}

}  // namespace

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

std::string WidenWhitespaceClasses(absl::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 's') {
        out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      } else if (next == 'S' && !in_class) {
        out += "[^\\s\\x{85}]";
      } else {
        out.push_back('\\');
        out.push_back(next);
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
  }
  return out;
}

absl::StatusOr<Regex> Regex::Compile(absl::string_view pattern) {
  const std::string widened = WidenWhitespaceClasses(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  auto code = std::make_unique<Code>();
  code->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(widened.data()), widened.size(),
                             PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset,
                             nullptr);
  if (code->code == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("regex \"", pattern, "\" does not compile: ",
                                                   Pcre2Message(error), " at offset ", offset));
  }
  // Without JIT (a build or platform that lacks it) the interpreter gives the same matches.
  code->jit = pcre2_jit_compile(code->code, PCRE2_JIT_COMPLETE) == 0;
  return Regex(std::string(pattern), std::move(code));
}

Regex::Regex(std::string pattern, std::unique_ptr<Code> code)
    : pattern_(std::move(pattern)), code_(std::move(code)) {}
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;
Regex::~Regex() = default;

absl::Status Regex::ForEachMatch(absl::string_view text,
                                 absl::FunctionRef<void(size_t, size_t)> on_match) const {
  ThreadMatchState& state = MatchState();
  if (state.data == nullptr) return absl::ResourceExhaustedError("PCRE2: out of memory");
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  constexpr uint32_t options = 0;
  while (start <= text.size()) {
    int rc = code_->jit ? pcre2_jit_match(code_->code, subject, text.size(), start, options,
                                          state.data, state.context)
                        : pcre2_match(code_->code, subject, text.size(), start, options,
                                      state.data, state.context);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // A pathological subject: the interpreter keeps its backtracking state on the heap.
      rc = pcre2_match(code_->code, subject, text.size(), start, options | PCRE2_NO_JIT,
                       state.data, state.context);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      return absl::InternalError(absl::StrCat("regex \"", pattern_, "\": ", Pcre2Message(rc)));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    const size_t match_start = ovector[0];
    const size_t match_end = ovector[1];
    if (match_end == match_start) {
      // Empty matches split nothing; like Rust's and Oniguruma's find_iter, the search
      // goes on from the next character.
      if (match_start >= text.size()) break;
      start = match_start + 1;
      while (start < text.size() && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) ++start;
      continue;
    }
    on_match(match_start, match_end);
    start = match_end;
  }
  return absl::OkStatus();
}

}  // namespace tessera
