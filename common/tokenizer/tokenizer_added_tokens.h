#ifndef TESSERA_COMMON_TOKENIZER_TOKENIZER_ADDED_TOKENS_H_
#define TESSERA_COMMON_TOKENIZER_TOKENIZER_ADDED_TOKENS_H_

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tokenizer/tokenizer.h"
#include "nlohmann/json_fwd.hpp"

namespace tessera {

// One entry of tokenizer.json's `added_tokens`.
struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;       // The token swallows whitespace on its left.
  bool rstrip = false;       // ... and on its right.
  bool single_word = false;  // Matches only when not inside a word.
};

// Finds added tokens (such as `<s>`) written literally in input text so that they encode
// to their own ids, as Hugging Face does before normalizing the rest. Unlike Hugging Face,
// tokens marked `normalized: true` are matched on the raw text too; for Llama-family
// tokenizers (whose normalizer only touches spaces) that gives the same result.
class AddedTokens {
 public:
  // `added_tokens` is the JSON array (or null); `source` names the file in errors.
  static absl::StatusOr<AddedTokens> FromJson(const nlohmann::json& added_tokens,
                                              absl::string_view source);

  struct Segment {
    absl::string_view text;  // Ordinary text when id < 0, else the matched token.
    int32_t id = -1;
  };
  // Splits `text` into ordinary runs and added tokens, taking the leftmost, then longest,
  // match. Empty ordinary runs are left out. Without `match_special`, tokens marked
  // special stay ordinary text (Hugging Face's encode_special_tokens); with
  // `plain_ranges` (sorted, disjoint), neither do those that overlap one of them.
  std::vector<Segment> Split(absl::string_view text, bool match_special = true,
                             const std::vector<TextRange>* plain_ranges = nullptr) const;
  // Whether `text` holds a token marked special (that Split would match).
  bool ContainsSpecial(absl::string_view text) const;

  // nullptr when `id` is not an added token.
  const AddedToken* FindById(int32_t id) const;
  // -1 when no added token has this content.
  int32_t IdForContent(absl::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> index_by_id_;
  // For each first byte, indexes into tokens_ ordered longest first.
  std::vector<std::vector<size_t>> by_first_byte_;
};

}  // namespace tessera

#endif  // TESSERA_COMMON_TOKENIZER_TOKENIZER_ADDED_TOKENS_H_
