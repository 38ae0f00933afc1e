#ifndef TESSERA_COMMON_SENTENCEPIECE_TOKENIZER_JSON_H_
#define TESSERA_COMMON_SENTENCEPIECE_TOKENIZER_JSON_H_

#include <string>
#include <utility>
#include <vector>

namespace tessera {

// A SentencePiece vocabulary in id order: pieces use "▁" for spaces, ids 0, 1 and 2 are
// <unk>, <s> and </s>, and `scores[i]` is piece i's score (higher merges first).
struct SentencePieceVocab {
  std::vector<std::string> pieces;
  std::vector<float> scores;
};

// BPE merges the way transformers' SentencePieceExtractor derives them: every split of a
// piece into two pieces that are both in the vocabulary is a merge; within a piece, splits
// are ordered by the ids of (left, right); then all merges are stably sorted by the merged
// piece's score, highest first. Splits fall on UTF-8 character boundaries.
std::vector<std::pair<std::string, std::string>> DeriveMerges(const SentencePieceVocab& vocab);

// A Hugging Face tokenizer.json for a Llama-style SentencePiece BPE with byte fallback:
// normalizer Prepend("▁") + Replace(" ", "▁"), no pre-tokenizer, <s> prepended, decoder
// Replace + ByteFallback + Fuse + Strip. Requires pieces.size() >= 3.
std::string SentencePieceTokenizerJson(const SentencePieceVocab& vocab);

// The matching tokenizer_config.json (LlamaTokenizer, add_bos_token true).
std::string LlamaTokenizerConfigJson(int model_max_length);

}  // namespace tessera

#endif  // TESSERA_COMMON_SENTENCEPIECE_TOKENIZER_JSON_H_
