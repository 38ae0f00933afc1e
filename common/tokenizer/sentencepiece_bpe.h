#ifndef TESSERA_COMMON_TOKENIZER_SENTENCEPIECE_BPE_H_
#define TESSERA_COMMON_TOKENIZER_SENTENCEPIECE_BPE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/tokenizer_added_tokens.h"
#include "common/tokenizer/tokenizer_bpe.h"
#include "common/tokenizer/tokenizer_decoder.h"
#include "common/tokenizer/tokenizer_specials.h"
#include "nlohmann/json_fwd.hpp"

namespace tessera {

// SentencePiece-style BPE as Hugging Face writes it for Llama 1/2, Mistral and TinyLlama:
// spaces become "▁" (a Prepend + Replace normalizer, or the older Metaspace
// pre-tokenizer), the BPE model merges characters with byte fallback, and the decoder
// undoes both.
class SentencePieceBpeTokenizer final : public Tokenizer {
 public:
  // `tokenizer` is the parsed tokenizer.json; `config` the parsed tokenizer_config.json or
  // null. The sources name the files in errors.
  static absl::StatusOr<std::unique_ptr<SentencePieceBpeTokenizer>> Create(
      const nlohmann::json& tokenizer, const nlohmann::json& config,
      absl::string_view tokenizer_source, absl::string_view config_source);

  std::vector<int32_t> Encode(absl::string_view text, bool add_special_tokens) const override {
    EncodeOptions options;
    options.add_special_tokens = add_special_tokens;
    return Encode(text, options);
  }
  std::vector<int32_t> Encode(absl::string_view text, const EncodeOptions& options) const override;
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
  // One normalizer step: Prepend (only to non-empty text, like Hugging Face) or Replace.
  struct NormalizerStep {
    bool prepend;
    std::string from;  // Replace only.
    std::string to;    // The prepended text, or the replacement.
  };
  enum class PrependScheme { kAlways, kFirst, kNever };
  struct Metaspace {
    std::string replacement;
    PrependScheme prepend_scheme = PrependScheme::kAlways;
    bool split = true;
  };

  SentencePieceBpeTokenizer(BpeModel model, AddedTokens added, TokenDecoder decoder)
      : model_(std::move(model)), added_(std::move(added)), decoder_(std::move(decoder)) {}

  static absl::Status ParseNormalizer(const nlohmann::json& normalizer, absl::string_view source,
                                      std::vector<NormalizerStep>* steps);
  static absl::Status ParsePreTokenizer(const nlohmann::json& pre_tokenizer,
                                        absl::string_view source,
                                        std::unique_ptr<Metaspace>* metaspace);
  // Normalizes and pre-tokenizes one run of ordinary text, then BPE-encodes its words.
  void EncodeSegment(absl::string_view segment, bool at_start, std::vector<int32_t>* ids) const;

  BpeModel model_;
  AddedTokens added_;
  TokenDecoder decoder_;
  std::vector<NormalizerStep> normalizer_;
  std::unique_ptr<Metaspace> metaspace_;  // Null when there is no pre-tokenizer.
  SpecialTokenPlan specials_;
  int32_t vocab_size_ = 0;
};

}  // namespace tessera

#endif  // TESSERA_COMMON_TOKENIZER_SENTENCEPIECE_BPE_H_
