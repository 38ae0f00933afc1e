#ifndef TESSERA_WORKER_SPECULATIVE_DRAFT_MODEL_PROPOSER_H_
#define TESSERA_WORKER_SPECULATIVE_DRAFT_MODEL_PROPOSER_H_

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/kv_cache.h"
#include "worker/llama_model.h"
#include "worker/speculative/proposer.h"

namespace tessera {

// Speculation with a smaller model of the same tokenizer, run by the same ranks (sharded
// like the target, on the same communicator) before the target's forward pass.
//
// Its KV cache mirrors the target's: the same number of blocks of the same size, and a
// sequence's draft KV lives in the same block ids as its target KV. The scheduler's block
// tables, preemption and lookahead slots thus serve both models, with no second
// allocator. What the draft cache holds for a sequence is tracked as the tokens fed to
// it; after verification the rejected tail simply stops matching the sequence and is
// fed again (overwritten) next time.
class DraftModelProposer final : public Proposer {
 public:
  // `model` (not owned, it outlives the proposer) shares the target's vocabulary;
  // `cache` is the draft model's, made with the target cache's num_blocks and block_size.
  DraftModelProposer(LlamaModel* model, std::unique_ptr<KvCache> cache)
      : model_(model), cache_(std::move(cache)) {}

  std::string_view name() const override { return "draft"; }
  absl::StatusOr<std::vector<DraftProposal>> Propose(
      absl::Span<const ProposalRequest> requests) override;
  void Forget(uint64_t seq_id) override { fed_.erase(seq_id); }

  const LlamaModel& model() const { return *model_; }

 private:
  LlamaModel* model_;
  std::unique_ptr<KvCache> cache_;
  // Per sequence: the tokens whose KV the draft cache holds, from position 0.
  std::unordered_map<uint64_t, std::vector<int32_t>> fed_;
  std::vector<float> logits_;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_SPECULATIVE_DRAFT_MODEL_PROPOSER_H_
