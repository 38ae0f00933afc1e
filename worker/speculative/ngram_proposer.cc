#include "worker/speculative/ngram_proposer.h"

#include <algorithm>

namespace tessera {

std::vector<int32_t> NgramLookup(absl::Span<const int32_t> tokens, int min_n, int max_n, int k) {
  std::vector<int32_t> proposal;
  const int len = static_cast<int>(tokens.size());
  if (k <= 0) return proposal;
  for (int n = std::min(max_n, len - 1); n >= std::max(min_n, 1); --n) {
    const absl::Span<const int32_t> suffix = tokens.subspan(len - n, n);
    // The most recent earlier occurrence: recent text predicts the next tokens best.
    for (int start = len - n - 1; start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + start)) continue;
      // tokens[start + n] follows the match; past the end, continue in the proposal.
      for (int j = 0; j < k; ++j) {
        const int at = start + n + j;
        proposal.push_back(at < len ? tokens[at] : proposal[at - len]);
      }
      return proposal;
    }
  }
  return proposal;
}

absl::StatusOr<std::vector<DraftProposal>> NgramProposer::Propose(
    absl::Span<const ProposalRequest> requests) {
  std::vector<DraftProposal> out(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    out[i].tokens = NgramLookup(requests[i].tokens, min_n_, max_n_, requests[i].max_tokens);
  }
  return out;
}

}  // namespace tessera
