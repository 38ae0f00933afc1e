#ifndef TESSERA_WORKER_SERVICE_STEP_EXECUTOR_H_
#define TESSERA_WORKER_SERVICE_STEP_EXECUTOR_H_

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/sampling_params.h"
#include "common/structured/token_grammar.h"
#include "common/structured/token_vocabulary.h"
#include "tessera/v1/worker.pb.h"
#include "worker/host_kv_tier.h"
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
  // gives lookahead slots. `vocabulary` (rank 0; null elsewhere or when the coordinator
  // sent none) is what grammar-constrained sequences are masked against.
  StepExecutor(LlamaModel* model, std::unique_ptr<KvCache> cache,
               std::unique_ptr<Proposer> proposer = nullptr,
               std::shared_ptr<const structured::TokenVocabulary> vocabulary = nullptr);

  absl::Status Execute(const v1::StepRequest& request, v1::StepResponse* response);
  // The host-memory KV tier the steps' kv_to_host / kv_from_host copies use.
  void set_host_tier(std::unique_ptr<HostKvTier> tier) { host_tier_ = std::move(tier); }

  size_t num_sequences() const { return seqs_.size(); }

  // Per logits row of a constrained sequence: the grammar state its token is drawn in.
  struct RowGrammar {
    structured::GrammarMatcher* matcher = nullptr;
    structured::GrammarMatcher::StateId state = 0;
  };
  const KvCache& cache() const { return *cache_; }
  KvCache& mutable_cache() { return *cache_; }  // For KV transfers beside the steps.

 private:
  struct SeqState {
    std::vector<int32_t> tokens;
    std::vector<int32_t> blocks;
    int prompt_len = 0;
    int num_computed = 0;
    SamplingParams sampling;
    // Rank 0, constrained sequences: the grammar position after the accepted output, or
    // why the sequence cannot go on (reported instead of its next token).
    bool constrained = false;  // On every rank: the sequence has a grammar.
    std::optional<structured::GrammarMatcher> grammar;
    std::string grammar_error;
  };
  // Sets up a new sequence's matcher and replays its output so far (after preemption).
  void StartGrammar(const v1::GrammarConstraint& constraint, SeqState* s);
  absl::StatusOr<std::shared_ptr<structured::TokenGrammar>> GrammarFor(const std::string& gbnf);
  // Grammar states of every constrained row, their masks computed (cached) on the way:
  // run beside the forward pass.
  absl::Status PrepareRowGrammars(const std::vector<SeqState*>& scheduled,
                                  const std::vector<int>& first_row,
                                  const std::vector<DraftProposal>& proposals,
                                  std::vector<RowGrammar>* rows);
  absl::Status Apply(const v1::StepRequest& request);
  // The step's copies between the device pool and the host tier, saves first.
  absl::Status CopyHostTier(const v1::StepRequest& request);
  // Proposals for the step's sequences (index into the request's scheduled ones); empty
  // where none.
  absl::StatusOr<std::vector<DraftProposal>> ProposeFor(const v1::StepRequest& request,
                                                        const std::vector<SeqState*>& scheduled);

  LlamaModel* model_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<Proposer> proposer_;
  std::unique_ptr<HostKvTier> host_tier_;
  std::unordered_map<uint64_t, SeqState> seqs_;
  std::vector<float> logits_;
  std::shared_ptr<const structured::TokenVocabulary> vocabulary_;
  // Compiled grammars by GBNF text, most recently used first (a service sends the same
  // schema again and again; its masks stay cached with it).
  std::list<std::pair<std::string, std::shared_ptr<structured::TokenGrammar>>> grammars_;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_SERVICE_STEP_EXECUTOR_H_
