#include "coordinator/api/token_offsets.h"

namespace tessera {
namespace {

// Tokens of left context for each incremental decode. Decoders only look at a token's
// neighbours for the leading-space strip of the very first piece and to fuse byte-fallback
// bytes into characters (4 bytes at most), so a few tokens make the suffix exact while the
// whole pass stays linear in the number of tokens.
constexpr size_t kContextTokens = 8;

}  // namespace

TokenOffsets ComputeTokenOffsets(const Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  TokenOffsets out;
  out.offsets.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    out.offsets.push_back(static_cast<uint32_t>(out.text.size()));
    // From the start while the prefix is short, so the first pieces decode exactly as in
    // Decode(ids); afterwards with kContextTokens of context.
    const size_t begin = i < kContextTokens ? 0 : i - kContextTokens;
    std::vector<int32_t> window(ids.begin() + begin, ids.begin() + i);
    const std::string before = tokenizer.Decode(window);
    window.push_back(ids[i]);
    const std::string after = tokenizer.Decode(window);
    // Raw bytes (byte fallback is never replaced mid-decode), so `before` is a prefix.
    if (after.size() > before.size()) out.text.append(after, before.size(), std::string::npos);
  }
  return out;
}

}  // namespace tessera
