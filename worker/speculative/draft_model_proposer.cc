#include "worker/speculative/draft_model_proposer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/sampler.h"

namespace tessera {
namespace {

// The draft's own draws come from a stream of their own (see SamplingUniform).
constexpr uint64_t kDraftStream = 0x9e6c63d0676a9a99ull;

}  // namespace

absl::StatusOr<std::vector<DraftProposal>> DraftModelProposer::Propose(
    absl::Span<const ProposalRequest> requests) {
  const int block_size = cache_->shape().block_size;
  const int vocab = model_->config().vocab_size;
  std::vector<DraftProposal> out(requests.size());
  // The sequences still proposing, and each one's tokens followed by its proposal so far.
  std::vector<size_t> active;
  std::vector<std::vector<int32_t>> extended(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].max_tokens <= 0 || requests[i].tokens.empty()) continue;
    active.push_back(i);
    extended[i].assign(requests[i].tokens.begin(), requests[i].tokens.end());
  }
  // Round 0 catches each sequence's draft KV up to its last token (from the first token
  // its cache does not hold) and proposes one token; each later round feeds the previous
  // proposal alone.
  for (int round = 0; !active.empty(); ++round) {
    StepBatch batch;
    for (size_t i : active) {
      batch.max_blocks_per_seq =
          std::max(batch.max_blocks_per_seq, static_cast<int>(requests[i].blocks.size()));
    }
    for (size_t i : active) {
      const ProposalRequest& r = requests[i];
      std::vector<int32_t>& fed = fed_[r.seq_id];
      const int end = static_cast<int>(extended[i].size());
      int begin = end - 1;
      if (round == 0) {
        const auto mismatch =
            std::mismatch(fed.begin(), fed.end(), extended[i].begin(), extended[i].end());
        begin = std::min<int>(mismatch.first - fed.begin(), end - 1);
      }
      if (end > static_cast<int>(r.blocks.size()) * block_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "draft model: sequence ", r.seq_id, " has ", end, " tokens but room for ",
            r.blocks.size() * block_size));
      }
      batch.AddSequence(extended[i], r.blocks, begin, end, block_size, /*wants_logits=*/true);
      fed.assign(extended[i].begin(), extended[i].end());
    }
    RETURN_IF_ERROR(model_->Forward(batch, cache_.get(), &logits_));
    std::vector<size_t> still;
    for (size_t row = 0; row < active.size(); ++row) {
      const size_t i = active[row];
      const ProposalRequest& r = requests[i];
      const absl::Span<const float> logits(logits_.data() + row * vocab, vocab);
      const SamplingParams& params = *r.sampling;
      // The draft's own distribution under the request's settings (penalties included, so
      // a greedy draft proposes what a greedy target would pick from the same logits).
      TokenDistribution q = SamplingDistribution(logits, params, extended[i], r.output_start);
      int32_t token = q.ids[0];
      if (!params.greedy()) {
        // Sampled; the verifier needs q to keep the target's distribution exactly.
        const uint64_t step = extended[i].size() - r.output_start;
        token = q.Draw(SamplingUniform(params.seed, step, kDraftStream));
        out[i].distributions.push_back(std::move(q));
      }
      out[i].tokens.push_back(token);
      extended[i].push_back(token);
      if (static_cast<int>(out[i].tokens.size()) < r.max_tokens) still.push_back(i);
    }
    active = std::move(still);
  }
  return out;
}

}  // namespace tessera
