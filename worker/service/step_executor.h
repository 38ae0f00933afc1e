#ifndef TESSERA_WORKER_SERVICE_STEP_EXECUTOR_H_
#define TESSERA_WORKER_SERVICE_STEP_EXECUTOR_H_

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "common/sampling_params.h"
#include "tessera/v1/worker.pb.h"
#include "worker/kv_cache.h"
#include "worker/llama_model.h"
#include "worker/speculative/proposer.h"

namespace tessera {

// Applies the coordinator's diff-based step requests on one rank: keeps each sequence's
// tokens, block table and sampling settings between steps, builds the forward batch, runs
// it, and (on rank 0) samples. Every rank of a group receives the same requests, so their
// states stay identical without any exchange beyond the collectives.
class StepExecutor {
 public:
  // `proposer` (optional) proposes speculative tokens for the sequences the coordinator
  // gives lookahead slots.
  StepExecutor(LlamaModel* model, std::unique_ptr<KvCache> cache,
               std::unique_ptr<Proposer> proposer = nullptr);

  absl::Status Execute(const v1::StepRequest& request, v1::StepResponse* response);

  size_t num_sequences() const { return seqs_.size(); }
  const KvCache& cache() const { return *cache_; }

 private:
  struct SeqState {
    std::vector<int32_t> tokens;
    std::vector<int32_t> blocks;
    int prompt_len = 0;
    int num_computed = 0;
    SamplingParams sampling;
  };
  absl::Status Apply(const v1::StepRequest& request);
  // Proposals for the step's sequences (index into the request's scheduled ones); empty
  // where none.
  absl::StatusOr<std::vector<DraftProposal>> ProposeFor(const v1::StepRequest& request,
                                                        const std::vector<SeqState*>& scheduled);

  LlamaModel* model_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<Proposer> proposer_;
  std::unordered_map<uint64_t, SeqState> seqs_;
  std::vector<float> logits_;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_SERVICE_STEP_EXECUTOR_H_
