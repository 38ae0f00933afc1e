#ifndef TESSERA_COMMON_TOKENIZER_TOKENIZER_H_
#define TESSERA_COMMON_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera {

// Bytes [begin, end) of a text.
struct TextRange {
  size_t begin = 0;
  size_t end = 0;
};

// Text <-> token ids for one model, loaded from Hugging Face `tokenizer.json` (+
// `tokenizer_config.json` for whether BOS is added). The tokenizer model kind is chosen
// from the file: SentencePiece-style BPE with byte fallback (Llama 1/2, Mistral,
// TinyLlama) or byte-level BPE (GPT-2 alphabet: Llama 3, Qwen2).
class Tokenizer {
 public:
  struct EncodeOptions {
    // Adds what the post-processor / tokenizer_config.json says (BOS for Llama).
    bool add_special_tokens = true;
    // False: text spelling a special token ("<|eot_id|>") is encoded as ordinary text, as
    // Meta's reference tokenizer does for user text and as tiktoken's
    // encode(disallowed_special=()) and Hugging Face's encode_special_tokens do. Added
    // tokens not marked special still match.
    bool parse_special_tokens = true;
    // Sorted, disjoint byte ranges of the text in which special tokens are not matched even
    // with parse_special_tokens: what a chat template copied from client messages under
    // --chat-special-tokens plain. Everything else (BPE across the range's edges included)
    // is as without them, so a range holding no special-token text changes nothing.
    std::vector<TextRange> plain_ranges;
  };

  virtual ~Tokenizer() = default;

  // Loads `<dir>/tokenizer.json` and, if present, `<dir>/tokenizer_config.json`.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::filesystem::path& dir);

  // Encodes `text`; prepends BOS when the config says so and `add_special_tokens` is set.
  virtual std::vector<int32_t> Encode(absl::string_view text, bool add_special_tokens = true) const = 0;
  // The same with every option; the real tokenizers override it (the default exists for
  // test doubles and ignores parse_special_tokens).
  virtual std::vector<int32_t> Encode(absl::string_view text, const EncodeOptions& options) const {
    return Encode(text, options.add_special_tokens);
  }

  // Decodes ids to text. Special tokens (BOS/EOS/UNK...) are skipped when
  // `skip_special_tokens`; incomplete UTF-8 from byte fallback is kept as raw bytes.
  virtual std::string Decode(const std::vector<int32_t>& ids,
                             bool skip_special_tokens = true) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1 when the model has none.
  virtual int32_t eos_id() const = 0;
  virtual bool IsSpecial(int32_t id) const = 0;

  // The vocabulary entry of `id` as the tokenizer spells it ("▁the", "<0x0A>", "<s>");
  // empty when `id` is outside the vocabulary. Defaults exist only so that test doubles
  // need not implement them; the real tokenizers override both.
  virtual std::string PieceForId(int32_t id) const { return std::string(); }
  // -1 when `piece` is not in the vocabulary.
  virtual int32_t IdForPiece(absl::string_view piece) const { return -1; }
  // Whether `text` spells a special token (one that Encode with parse_special_tokens would
  // turn into its id). False in test doubles.
  virtual bool ContainsSpecialTokenText(absl::string_view text) const { return false; }
};

}  // namespace tessera

#endif  // TESSERA_COMMON_TOKENIZER_TOKENIZER_H_
