#ifndef TESSERA_COMMON_TOKENIZER_TOKENIZER_BPE_H_
#define TESSERA_COMMON_TOKENIZER_TOKENIZER_BPE_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json_fwd.hpp"

namespace tessera {

// The BPE `model` of a Hugging Face tokenizer.json: vocabulary, ranked merges, byte
// fallback and unknown-token handling. It turns one pre-tokenized word into ids and knows
// nothing about normalizers, pre-tokenizers or special tokens, so SentencePiece-style and
// byte-level tokenizers can share it.
class BpeModel {
 public:
  // Parses the `model` object (type "BPE") of tokenizer.json; `source` names the file in
  // errors.
  static absl::StatusOr<BpeModel> FromJson(const nlohmann::json& model, absl::string_view source);

  // Appends the ids of `word`. Characters missing from the vocabulary become `<0xXX>` byte
  // pieces when byte fallback is on and all their bytes have pieces, else the unknown token
  // (dropped when the model has none, as Hugging Face does). A long word (a whole text,
  // for tokenizers without a pre-tokenizer) is encoded in chunks cut where no merge can
  // reach across, so its memory stays a small multiple of the chunk, with the same ids.
  void EncodeWord(absl::string_view word, std::vector<int32_t>* ids) const;

  // Applies the merges to `symbols` (ids of the word's characters, in order) until none
  // applies: lowest rank first, the leftmost pair on ties, as Hugging Face does.
  // `ignore_merges` is the caller's business (it needs the word's spelling).
  void MergeSymbols(std::vector<int32_t>* symbols) const;

  // -1 when `piece` is not in the vocabulary.
  int32_t IdForPiece(absl::string_view piece) const;
  // Empty for ids outside the vocabulary or holes in it.
  const std::string& PieceForId(int32_t id) const;
  // The byte that a `<0xXX>` piece stands for, or -1 for any other id.
  int ByteForId(int32_t id) const;

  // One more than the largest id in the vocabulary.
  int32_t size() const { return static_cast<int32_t>(pieces_.size()); }
  int32_t unk_id() const { return unk_id_; }
  bool byte_fallback() const { return byte_fallback_; }
  // Llama 3 sets it: a word that is itself in the vocabulary is one token, merges or not.
  bool ignore_merges() const { return ignore_merges_; }
  bool fuse_unk() const { return fuse_unk_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  const Merge* FindMerge(int32_t left, int32_t right) const {
    auto it = merges_.find(PairKey(left, right));
    return it == merges_.end() ? nullptr : &it->second;
  }
  // MergeSymbols for long words: a heap of candidate pairs over a linked list.
  void MergeLongWord(std::vector<int32_t>* symbols) const;
  // EncodeWord without chunking.
  void EncodeChunk(absl::string_view word, std::vector<int32_t>* ids) const;
  // True when no BPE merge can join symbols across byte `pos` of `word` (a character
  // boundary): no vocabulary piece spans it and both neighbouring characters are pieces.
  bool IsSafeCut(absl::string_view word, size_t pos) const;

  absl::flat_hash_map<std::string, int32_t> vocab_;
  std::vector<std::string> pieces_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_ids_;  // -1 where `<0xXX>` is not in the vocabulary.
  std::vector<int16_t> byte_of_id_;    // Inverse of byte_ids_, -1 elsewhere.
  int32_t unk_id_ = -1;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  size_t max_piece_bytes_ = 0;
  // Merges join only pieces spelled by the text itself (no byte-fallback or unknown
  // piece takes part in one), which is what makes IsSafeCut's test on the text sound.
  bool cuttable_ = true;
};

}  // namespace tessera

#endif  // TESSERA_COMMON_TOKENIZER_TOKENIZER_BPE_H_
