#include "common/structured/token_vocabulary.h"

#include <algorithm>
#include <numeric>

namespace tessera::structured {

std::shared_ptr<const TokenVocabulary> TokenVocabulary::Build(
    std::vector<std::string> token_bytes, absl::Span<const int32_t> special_ids) {
  auto v = std::shared_ptr<TokenVocabulary>(new TokenVocabulary);
  v->bytes_ = std::move(token_bytes);
  const int32_t n = static_cast<int32_t>(v->bytes_.size());
  v->is_text_.assign(n, true);
  for (int32_t id : special_ids) {
    if (id >= 0 && id < n) v->is_text_[id] = false;
  }
  std::vector<int32_t> order;
  for (int32_t id = 0; id < n; ++id) {
    if (v->bytes_[id].empty()) v->is_text_[id] = false;
    if (v->is_text_[id]) order.push_back(id);
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return v->bytes_[a] != v->bytes_[b] ? v->bytes_[a] < v->bytes_[b] : a < b;
  });
  // Preorder construction from the sorted tokens: `path` holds the open nodes by depth.
  v->node_byte_.push_back(0);
  v->node_depth_.push_back(0);
  v->node_end_.push_back(0);
  v->token_begin_.push_back(0);
  std::vector<uint32_t> path = {0};
  const std::string* previous = nullptr;
  auto close_to = [&](size_t depth) {
    while (path.size() > depth + 1) {
      v->node_end_[path.back()] = static_cast<uint32_t>(v->node_byte_.size());
      path.pop_back();
    }
  };
  for (int32_t id : order) {
    const std::string& s = v->bytes_[id];
    size_t lcp = 0;
    if (previous != nullptr) {
      while (lcp < s.size() && lcp < previous->size() && s[lcp] == (*previous)[lcp]) ++lcp;
    }
    close_to(lcp);
    for (size_t d = lcp; d < s.size(); ++d) {
      path.push_back(static_cast<uint32_t>(v->node_byte_.size()));
      v->node_byte_.push_back(static_cast<uint8_t>(s[d]));
      v->node_depth_.push_back(static_cast<uint32_t>(d + 1));
      v->node_end_.push_back(0);
      v->token_begin_.push_back(static_cast<uint32_t>(v->token_ids_.size()));
    }
    // Tokens of a node follow it directly in preorder, so they extend its range.
    v->token_ids_.push_back(id);
    v->max_depth_ = std::max<uint32_t>(v->max_depth_, static_cast<uint32_t>(s.size()));
    previous = &s;
  }
  close_to(0);
  v->node_end_[0] = static_cast<uint32_t>(v->node_byte_.size());
  v->token_begin_.push_back(static_cast<uint32_t>(v->token_ids_.size()));
  return v;
}

}  // namespace tessera::structured
