#ifndef TESSERA_COMMON_TOKENIZER_PRE_TOKENIZER_H_
#define TESSERA_COMMON_TOKENIZER_PRE_TOKENIZER_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tokenizer/regex.h"
#include "nlohmann/json_fwd.hpp"

namespace tessera {

// How a Split pre-tokenizer treats the delimiters its pattern matches (Hugging Face's
// SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Pieces of `text` from `matches` (sorted, non-overlapping [start, end) ranges): the
// matched and unmatched runs, grouped by `behavior`; with `invert` the unmatched runs are
// the delimiters. Empty pieces are left out. Exposed for tests.
std::vector<std::pair<size_t, size_t>> SplitByMatches(
    size_t text_size, const std::vector<std::pair<size_t, size_t>>& matches,
    SplitBehavior behavior, bool invert);

// The `pre_tokenizer` of a byte-level tokenizer.json: Split (regex or literal pattern,
// any behavior, invert), Digits, ByteLevel (add_prefix_space, use_regex with the GPT-2
// pattern) and Sequence of them. It cuts raw text into the pre-tokens that BPE encodes one
// by one; the byte-to-character mapping of ByteLevel is left to the caller.
class ByteLevelPreTokenizer {
 public:
  // `pre_tokenizer` must hold a ByteLevel step (possibly inside a Sequence) and no Split
  // after it; `source` names the file in errors.
  static absl::StatusOr<ByteLevelPreTokenizer> FromJson(const nlohmann::json& pre_tokenizer,
                                                         absl::string_view source);

  // Calls `on_piece` for each non-empty pre-token of `text`, in order. The views point
  // into `text` or into scratch space that lives only during the call.
  absl::Status Split(absl::string_view text,
                     absl::FunctionRef<void(absl::string_view)> on_piece) const;

 private:
  struct Step {
    bool prefix_space = false;  // ByteLevel(add_prefix_space): " " before a piece lacking it.
    std::vector<Regex> regex;   // Split: empty or one pattern (a vector keeps Step movable).
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
  };
  static absl::Status AddSteps(const nlohmann::json& pre_tokenizer, absl::string_view source,
                               bool* seen_byte_level, std::vector<Step>* steps);
  absl::Status Run(size_t step, absl::string_view piece,
                   absl::FunctionRef<void(absl::string_view)> on_piece) const;

  std::vector<Step> steps_;
};

}  // namespace tessera

#endif  // TESSERA_COMMON_TOKENIZER_PRE_TOKENIZER_H_
