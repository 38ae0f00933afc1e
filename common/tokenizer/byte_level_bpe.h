#ifndef TESSERA_COMMON_TOKENIZER_BYTE_LEVEL_BPE_H_
#define TESSERA_COMMON_TOKENIZER_BYTE_LEVEL_BPE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tokenizer/normalizer.h"
#include "common/tokenizer/pre_tokenizer.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/tokenizer_added_tokens.h"
#include "common/tokenizer/tokenizer_bpe.h"
#include "common/tokenizer/tokenizer_specials.h"
#include "nlohmann/json_fwd.hpp"

namespace tessera {

// Byte-level BPE as GPT-2, Llama 3 and Qwen2 use it: added tokens are cut out first, the
// rest is Unicode-normalized when the file says so (Qwen2: NFC), the pre-tokenizer (regex Splits, ByteLevel) cuts the rest into pre-tokens, each pre-token's
// bytes are spelled in the GPT-2 alphabet and merged by the BPE model, and the ByteLevel
// decoder maps the alphabet back to bytes.
class ByteLevelBpeTokenizer final : public Tokenizer {
 public:
  // `tokenizer` is the parsed tokenizer.json; `config` the parsed tokenizer_config.json or
  // null. The sources name the files in errors.
  static absl::StatusOr<std::unique_ptr<ByteLevelBpeTokenizer>> Create(
      const nlohmann::json& tokenizer, const nlohmann::json& config,
      absl::string_view tokenizer_source, absl::string_view config_source);

  std::vector<int32_t> Encode(absl::string_view text, bool add_special_tokens) const override {
    EncodeOptions options;
    options.add_special_tokens = add_special_tokens;
    return Encode(text, options);
  }
  std::vector<int32_t> Encode(absl::string_view text, const EncodeOptions& options) const override;
  // Bytes that do not form valid UTF-8 (a character cut between tokens) are kept as they
  // are, so that a caller decoding a growing prefix can wait for the rest.
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  int32_t bos_id() const override { return specials_.bos_id; }
  int32_t eos_id() const override { return specials_.eos_id; }
  bool IsSpecial(int32_t id) const override;
  std::string PieceForId(int32_t id) const override;
  int32_t IdForPiece(absl::string_view piece) const override;
  bool ContainsSpecialTokenText(absl::string_view text) const override {
    return added_.ContainsSpecial(text);
  }

 private:
  ByteLevelBpeTokenizer(BpeModel model, AddedTokens added, UnicodeNormalizer normalizer,
                        ByteLevelPreTokenizer pre_tokenizer);
  // Pre-tokenizes and encodes one run of text between added tokens.
  void EncodeSegment(absl::string_view segment, std::vector<int32_t>* ids) const;

  // Appends the ids of one pre-token (raw bytes).
  void EncodePreToken(absl::string_view pre_token, std::vector<int32_t>* ids) const;
  void EncodeUncached(absl::string_view pre_token, std::vector<int32_t>* ids) const;

  BpeModel model_;
  AddedTokens added_;
  UnicodeNormalizer normalizer_;
  ByteLevelPreTokenizer pre_tokenizer_;
  SpecialTokenPlan specials_;
  int32_t vocab_size_ = 0;
  // The id of each byte's one-character piece; -1 where the vocabulary lacks it.
  std::array<int32_t, 256> byte_ids_;
  // The raw bytes of each model piece, for decoding without a per-call table walk.
  std::vector<std::string> piece_bytes_;
  // Tells this tokenizer's entries in the per-thread pre-token cache from another's.
  uint64_t cache_owner_ = 0;
};

}  // namespace tessera

#endif  // TESSERA_COMMON_TOKENIZER_BYTE_LEVEL_BPE_H_
