#ifndef TESSERA_COMMON_TOKENIZER_VOCABULARY_H_
#define TESSERA_COMMON_TOKENIZER_VOCABULARY_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "common/tokenizer/tokenizer_added_tokens.h"
#include "common/tokenizer/tokenizer_bpe.h"
#include "common/tokenizer/tokenizer_specials.h"

namespace tessera {

// A BPE model's vocabulary with the added tokens laid over it, as both tokenizer kinds
// hold them. An added token's entry wins over the model's, as in Hugging Face tokenizers.
struct BpeVocabulary {
  const BpeModel& model;
  const AddedTokens& added;

  std::string PieceForId(int32_t id) const {
    if (const AddedToken* a = added.FindById(id)) return a->content;
    return model.PieceForId(id);
  }
  int32_t IdForPiece(absl::string_view piece) const {
    const int32_t id = added.IdForContent(piece);
    return id >= 0 ? id : model.IdForPiece(piece);
  }
  // BOS, EOS, the model's unk (where it has one) and added tokens marked special.
  bool IsSpecial(const SpecialTokenPlan& specials, int32_t id) const {
    if (id < 0) return false;
    if (id == specials.bos_id || id == specials.eos_id || id == model.unk_id()) return true;
    const AddedToken* a = added.FindById(id);
    return a != nullptr && a->special;
  }
};

}  // namespace tessera

#endif  // TESSERA_COMMON_TOKENIZER_VOCABULARY_H_
