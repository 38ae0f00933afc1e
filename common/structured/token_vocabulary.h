#ifndef TESSERA_COMMON_STRUCTURED_TOKEN_VOCABULARY_H_
#define TESSERA_COMMON_STRUCTURED_TOKEN_VOCABULARY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/types/span.h"

namespace tessera::structured {

// A model's vocabulary as the grammar engine sees it: each token's bytes in generated
// text, and the tokens that may appear in constrained text (not special, not empty),
// arranged as a byte trie in preorder so a walk can skip a whole subtree (every token
// sharing a prefix the grammar rejects) in one step.
class TokenVocabulary {
 public:
  // `token_bytes[id]` as generated text shows it; `special_ids` never match a grammar.
  static std::shared_ptr<const TokenVocabulary> Build(std::vector<std::string> token_bytes,
                                                      absl::Span<const int32_t> special_ids);

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[id]; }
  bool is_text(int32_t id) const { return is_text_[id]; }

  // The trie, node 0 being the empty prefix. Node i (i > 0) extends its parent (the
  // nearest earlier node of depth depth(i) - 1) by byte(i); its subtree is [i, end(i)),
  // and the tokens spelled exactly by it are token_ids()[token_begin(i), token_begin(i+1)).
  size_t num_nodes() const { return node_byte_.size(); }
  uint8_t node_byte(size_t i) const { return node_byte_[i]; }
  uint32_t node_depth(size_t i) const { return node_depth_[i]; }
  uint32_t node_end(size_t i) const { return node_end_[i]; }
  uint32_t token_begin(size_t i) const { return token_begin_[i]; }
  const std::vector<int32_t>& token_ids() const { return token_ids_; }
  uint32_t max_depth() const { return max_depth_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<bool> is_text_;
  std::vector<uint8_t> node_byte_;
  std::vector<uint32_t> node_depth_;
  std::vector<uint32_t> node_end_;
  std::vector<uint32_t> token_begin_;  // num_nodes + 1 entries.
  std::vector<int32_t> token_ids_;
  uint32_t max_depth_ = 0;
};

}  // namespace tessera::structured

#endif  // TESSERA_COMMON_STRUCTURED_TOKEN_VOCABULARY_H_
