#include "worker/service/step_executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/sampler.h"
#include "worker/speculative/rejection_sampler.h"

namespace tessera {
namespace {

SamplingParams FromProto(const v1::SamplingConfig& s) {
  SamplingParams p;
  p.temperature = s.temperature();
  p.top_k = s.top_k();
  p.top_p = s.top_p() > 0 ? s.top_p() : 1.0f;
  p.min_p = s.min_p();
  p.seed = s.seed();
  p.has_seed = true;
  p.repetition_penalty = s.repetition_penalty() > 0 ? s.repetition_penalty() : 1.0f;
  p.presence_penalty = s.presence_penalty();
  p.frequency_penalty = s.frequency_penalty();
  p.num_logprobs = static_cast<int>(s.num_logprobs());
  return p;
}

}  // namespace

namespace {

// Masks a constrained sequence's logits rows (one, or one per speculative draft plus
// one). A row after a draft the grammar rejects is left alone: that draft has no
// probability left, so verification stops before reaching it.
absl::Status MaskRows(const std::vector<StepExecutor::RowGrammar>& row_grammars, int first,
                      size_t num_rows, size_t vocab, float* rows) {
  for (size_t r = 0; r < num_rows; ++r) {
    const StepExecutor::RowGrammar& g = row_grammars[first + r];
    if (g.matcher == nullptr) return absl::InternalError("constrained row without a grammar state");
    if (g.state == structured::GrammarAutomaton::kDead) {
      if (r == 0) return absl::InternalError("the output left its grammar");
      break;
    }
    absl::Span<float> row(rows + r * vocab, vocab);
    RETURN_IF_ERROR(g.matcher->MaskLogits(g.state, row));
    if (r == 0 && std::none_of(row.begin(), row.end(), [](float x) { return std::isfinite(x); })) {
      return absl::FailedPreconditionError(
          "no token of the vocabulary continues the output's grammar here");
    }
  }
  return absl::OkStatus();
}

}  // namespace

// Grammars kept compiled (with their cached masks) beyond the sequences using them.
constexpr size_t kGrammarCacheEntries = 64;

StepExecutor::StepExecutor(LlamaModel* model, std::unique_ptr<KvCache> cache,
                           std::unique_ptr<Proposer> proposer,
                           std::shared_ptr<const structured::TokenVocabulary> vocabulary)
    : model_(model),
      cache_(std::move(cache)),
      proposer_(std::move(proposer)),
      vocabulary_(std::move(vocabulary)) {}

absl::StatusOr<std::shared_ptr<structured::TokenGrammar>> StepExecutor::GrammarFor(
    const std::string& gbnf) {
  for (auto it = grammars_.begin(); it != grammars_.end(); ++it) {
    if (it->first == gbnf) {
      grammars_.splice(grammars_.begin(), grammars_, it);
      return grammars_.front().second;
    }
  }
  ASSIGN_OR_RETURN(std::shared_ptr<const structured::Grammar> grammar,
                   structured::Grammar::FromGbnf(gbnf));
  grammars_.emplace_front(gbnf, std::make_shared<structured::TokenGrammar>(grammar, vocabulary_));
  if (grammars_.size() > kGrammarCacheEntries) grammars_.pop_back();
  return grammars_.front().second;
}

void StepExecutor::StartGrammar(const v1::GrammarConstraint& constraint, SeqState* s) {
  if (vocabulary_ == nullptr) {
    s->grammar_error = "this worker has no vocabulary for grammar constraints";
    return;
  }
  absl::StatusOr<std::shared_ptr<structured::TokenGrammar>> grammar = GrammarFor(constraint.gbnf());
  absl::StatusOr<structured::GrammarMatcher> matcher =
      grammar.ok() ? structured::GrammarMatcher::Create(
                         *grammar, {constraint.end_token_ids().begin(), constraint.end_token_ids().end()})
                   : absl::StatusOr<structured::GrammarMatcher>(grammar.status());
  if (!matcher.ok()) {
    s->grammar_error = absl::StrCat("grammar: ", matcher.status().message());
    return;
  }
  s->grammar.emplace(*std::move(matcher));
  // A preempted sequence comes back with its output: replay it.
  for (size_t i = s->prompt_len; i < s->tokens.size(); ++i) {
    if (absl::Status a = s->grammar->Accept(s->tokens[i]); !a.ok()) {
      s->grammar_error = std::string(a.message());
      return;
    }
  }
}

absl::Status StepExecutor::PrepareRowGrammars(const std::vector<SeqState*>& scheduled,
                                              const std::vector<int>& first_row,
                                              const std::vector<DraftProposal>& proposals,
                                              std::vector<RowGrammar>* rows) {
  for (size_t i = 0; i < scheduled.size(); ++i) {
    SeqState& s = *scheduled[i];
    if (first_row[i] < 0 || !s.grammar.has_value() || !s.grammar_error.empty()) continue;
    structured::GrammarMatcher& m = *s.grammar;
    structured::GrammarMatcher::StateId state =
        m.finished() ? structured::kFinishedState : m.state();
    const std::vector<int32_t>& drafts = proposals[i].tokens;
    // Row r scores the token after drafts[0, r): its state follows them without moving
    // the matcher, which advances only on what the coordinator confirms as accepted.
    for (size_t r = 0; r <= drafts.size(); ++r) {
      RowGrammar& row = (*rows)[first_row[i] + r];
      row.matcher = &m;
      row.state = state;
      if (state >= 0 && state != structured::GrammarAutomaton::kDead) {
        absl::StatusOr<std::shared_ptr<const structured::TokenBitmask>> mask =
            m.grammar().Mask(state);
        if (!mask.ok()) {
          s.grammar_error = std::string(mask.status().message());
          break;
        }
      }
      if (r < drafts.size()) {
        ASSIGN_OR_RETURN(state, m.Peek(state, {drafts[r]}));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status StepExecutor::Apply(const v1::StepRequest& request) {
  for (uint64_t id : request.finished_seq_ids()) {
    seqs_.erase(id);
    if (proposer_ != nullptr) proposer_->Forget(id);
  }
  for (const v1::NewSequence& n : request.new_sequences()) {
    if (proposer_ != nullptr) proposer_->Forget(n.seq_id());  // Its blocks are new.
    SeqState s;
    s.tokens.assign(n.token_ids().begin(), n.token_ids().end());
    s.blocks.assign(n.block_ids().begin(), n.block_ids().end());
    s.prompt_len = static_cast<int>(n.prompt_len());
    s.num_computed = static_cast<int>(n.num_computed_tokens());
    s.sampling = FromProto(n.sampling());
    s.constrained = n.has_grammar() && !n.grammar().gbnf().empty();
    // Only rank 0 samples, so only it follows grammars.
    if (s.constrained && model_->layout().rank == 0) StartGrammar(n.grammar(), &s);
    seqs_[n.seq_id()] = std::move(s);
  }
  for (const v1::CachedSequence& c : request.cached_sequences()) {
    auto it = seqs_.find(c.seq_id());
    if (it == seqs_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("step ", request.step_id(), " continues sequence ", c.seq_id(),
                       " that this worker does not hold"));
    }
    SeqState& s = it->second;
    s.tokens.insert(s.tokens.end(), c.new_token_ids().begin(), c.new_token_ids().end());
    if (s.grammar.has_value() && s.grammar_error.empty()) {
      for (const int32_t id : c.new_token_ids()) {
        if (absl::Status a = s.grammar->Accept(id); !a.ok()) {
          s.grammar_error = std::string(a.message());
          break;
        }
      }
    }
    s.blocks.insert(s.blocks.end(), c.new_block_ids().begin(), c.new_block_ids().end());
    s.num_computed = static_cast<int>(c.num_computed_tokens());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<DraftProposal>> StepExecutor::ProposeFor(
    const v1::StepRequest& request, const std::vector<SeqState*>& scheduled) {
  std::vector<DraftProposal> proposals(scheduled.size());
  if (request.num_lookahead_tokens_size() == 0) return proposals;
  if (request.num_lookahead_tokens_size() != request.scheduled_seq_ids_size()) {
    return absl::InvalidArgumentError("num_lookahead_tokens and scheduled_seq_ids differ in length");
  }
  if (proposer_ == nullptr) return proposals;  // Lookahead slots simply go unused.
  const int block_size = cache_->shape().block_size;
  std::vector<ProposalRequest> asks;
  std::vector<int> asked;
  for (size_t i = 0; i < scheduled.size(); ++i) {
    const SeqState& s = *scheduled[i];
    const int lookahead = static_cast<int>(request.num_lookahead_tokens(i));
    // Only a decode step (its one uncomputed token) speculates, within its blocks.
    const int len = static_cast<int>(s.tokens.size());
    if (lookahead <= 0 || request.num_scheduled_tokens(i) != 1 || s.num_computed + 1 != len) {
      continue;
    }
    ProposalRequest& ask = asks.emplace_back();
    ask.seq_id = request.scheduled_seq_ids(i);
    ask.tokens = s.tokens;
    ask.blocks = s.blocks;
    ask.output_start = s.prompt_len;
    ask.sampling = &s.sampling;
    ask.max_tokens =
        std::min(lookahead, static_cast<int>(s.blocks.size()) * block_size - len);
    asked.push_back(static_cast<int>(i));
  }
  if (asks.empty()) return proposals;
  ASSIGN_OR_RETURN(std::vector<DraftProposal> made, proposer_->Propose(asks));
  // Token ids are checked with the rest of the batch (LlamaModel::Forward).
  for (size_t a = 0; a < asked.size(); ++a) {
    DraftProposal& p = made[a];
    if (static_cast<int>(p.tokens.size()) > asks[a].max_tokens) {
      p.tokens.resize(asks[a].max_tokens);
      if (!p.distributions.empty()) p.distributions.resize(asks[a].max_tokens);
    }
    proposals[asked[a]] = std::move(p);
  }
  return proposals;
}

absl::Status StepExecutor::CopyHostTier(const v1::StepRequest& request) {
  if (request.kv_to_host_size() + request.kv_from_host_size() == 0) return absl::OkStatus();
  if (host_tier_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("step ", request.step_id(), " copies KV blocks to or from a host tier this worker does not have"));
  }
  for (const v1::KvBlockCopy& c : request.kv_to_host()) {
    RETURN_IF_ERROR(host_tier_->Save(*cache_, static_cast<int>(c.block_id()), static_cast<int>(c.host_slot())));
  }
  for (const v1::KvBlockCopy& c : request.kv_from_host()) {
    RETURN_IF_ERROR(host_tier_->Load(static_cast<int>(c.host_slot()), *cache_, static_cast<int>(c.block_id())));
  }
  return absl::OkStatus();
}

absl::Status StepExecutor::Execute(const v1::StepRequest& request, v1::StepResponse* response) {
  response->set_step_id(request.step_id());
  RETURN_IF_ERROR(CopyHostTier(request));
  RETURN_IF_ERROR(Apply(request));
  if (request.scheduled_seq_ids_size() != request.num_scheduled_tokens_size()) {
    return absl::InvalidArgumentError("scheduled_seq_ids and num_scheduled_tokens differ in length");
  }
  if (request.scheduled_seq_ids_size() == 0) return absl::OkStatus();

  const int block_size = cache_->shape().block_size;
  StepBatch batch;
  int max_blocks = 0;
  std::vector<SeqState*> scheduled;
  for (int i = 0; i < request.scheduled_seq_ids_size(); ++i) {
    auto it = seqs_.find(request.scheduled_seq_ids(i));
    if (it == seqs_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("sequence ", request.scheduled_seq_ids(i), " scheduled but unknown"));
    }
    scheduled.push_back(&it->second);
    max_blocks = std::max(max_blocks, static_cast<int>(it->second.blocks.size()));
  }
  ASSIGN_OR_RETURN(const std::vector<DraftProposal> proposals, ProposeFor(request, scheduled));
  batch.max_blocks_per_seq = max_blocks;
  // Decode sequences (one token) go first, so a backend can give them its decode attention
  // kernel (kernels::AttentionBatch::num_decode_seqs); the response keeps the request's order.
  std::vector<int> order(scheduled.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_partition(order.begin(), order.end(), [&](int i) {
    return request.num_scheduled_tokens(i) == 1 && proposals[i].tokens.empty();
  });
  // Per logits row, the sequence it belongs to; a speculating sequence has one row per
  // token it feeds (its last token, then each proposed one), consecutive.
  std::vector<int> logits_seq;
  std::vector<int> first_row(scheduled.size(), -1);
  for (const int i : order) {
    SeqState& s = *scheduled[i];
    const int n = static_cast<int>(request.num_scheduled_tokens(i));
    const int end = s.num_computed + n;
    if (n <= 0 || end > static_cast<int>(s.tokens.size()) ||
        end > static_cast<int>(s.blocks.size()) * block_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence ", request.scheduled_seq_ids(i), ": ", n, " tokens scheduled after ",
          s.num_computed, " computed, but it has ", s.tokens.size(), " tokens and ",
          s.blocks.size(), " blocks"));
    }
    const bool samples = end == static_cast<int>(s.tokens.size());
    const std::vector<int32_t>& drafts = proposals[i].tokens;
    if (drafts.empty()) {
      batch.AddSequence(s.tokens, s.blocks, s.num_computed, end, block_size, samples);
      if (samples) {
        first_row[i] = static_cast<int>(logits_seq.size());
        logits_seq.push_back(i);
      }
    } else {
      // The proposed tokens are scored in the same pass; their KV is written to the
      // lookahead slots and simply overwritten later where they are rejected.
      std::vector<int32_t> extended = s.tokens;
      extended.insert(extended.end(), drafts.begin(), drafts.end());
      const int rows = 1 + static_cast<int>(drafts.size());
      batch.AddSequence(extended, s.blocks, s.num_computed, end + rows - 1, block_size, false);
      first_row[i] = static_cast<int>(logits_seq.size());
      for (int r = 0; r < rows; ++r) {
        batch.logits_rows.push_back(batch.num_tokens() - rows + r);
        logits_seq.push_back(i);
      }
    }
    s.num_computed = end;
  }

  // Where the backend samples on its device (CUDA), only token ids come back to the host;
  // top-n logprobs and speculative verification still need the full rows here. Every rank
  // decides alike (the same requests, the same backend kind, the same proposals), so all
  // of them run the same collectives.
  kernels::Backend& backend = *model_->backend();
  const bool speculating = std::any_of(proposals.begin(), proposals.end(),
                                       [](const DraftProposal& p) { return !p.tokens.empty(); });
  // Grammar masks apply to host rows, so a constrained row keeps the step on the host
  // (every rank knows which sequences are constrained and decides alike).
  const bool on_device =
      backend.HasDeviceSampler() && !speculating &&
      std::all_of(logits_seq.begin(), logits_seq.end(), [&](int i) {
        return scheduled[i]->sampling.num_logprobs == 0 && !scheduled[i]->constrained;
      });
  const float* device_logits = nullptr;
  // The grammar states of the constrained rows and their masks (cached per state). Where
  // the forward pass runs on a device the host is idle meanwhile, so they are worked out
  // on another thread beside it; the CPU backend's forward already keeps every core busy
  // (its threads wait for each other at every layer), so there they run before it.
  std::vector<RowGrammar> row_grammars(logits_seq.size());
  std::future<absl::Status> grammar_work;
  double grammar_seconds = 0;  // Reported with the step (worker metrics).
  if (model_->layout().rank == 0 &&
      std::any_of(scheduled.begin(), scheduled.end(),
                  [](const SeqState* s) { return s->grammar.has_value(); })) {
    auto prepare = [&] {
      const auto t0 = std::chrono::steady_clock::now();
      absl::Status s = PrepareRowGrammars(scheduled, first_row, proposals, &row_grammars);
      grammar_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return s;
    };
    if (backend.name() == "cpu") {
      RETURN_IF_ERROR(prepare());
    } else {
      grammar_work = std::async(std::launch::async, prepare);
    }
  }
  const auto start = std::chrono::steady_clock::now();
  absl::Status forward =
      model_->Forward(batch, cache_.get(), &logits_, on_device ? &device_logits : nullptr);
  response->set_forward_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (grammar_work.valid()) {
    absl::Status prepared = grammar_work.get();
    RETURN_IF_ERROR(forward);
    RETURN_IF_ERROR(prepared);
  }
  RETURN_IF_ERROR(forward);

  // Every rank holds the full logits; rank 0 samples and answers for the group.
  if (model_->layout().rank != 0) return absl::OkStatus();
  const size_t vocab = model_->config().vocab_size;
  // Tokens per scheduled sequence that samples (one, or with speculation up to 1 + drafts).
  std::vector<std::vector<SampledToken>> drawn(scheduled.size());
  std::vector<std::string> errors(scheduled.size());
  if (on_device) {
    std::vector<kernels::DeviceSamplingRow> rows(logits_seq.size());
    std::vector<int32_t> penalty_tokens;
    std::vector<int32_t> penalty_counts;
    for (size_t row = 0; row < logits_seq.size(); ++row) {
      const SeqState& s = *scheduled[logits_seq[row]];
      rows[row] = DeviceSamplingRowFor(s.sampling, s.tokens, s.prompt_len,
                                       s.tokens.size() - s.prompt_len, &penalty_tokens,
                                       &penalty_counts);
    }
    std::vector<int32_t> ids(rows.size());
    std::vector<float> logprobs(rows.size());
    std::string error;
    if (!backend.SampleOnDevice(device_logits, static_cast<int>(vocab), rows.data(),
                                static_cast<int>(rows.size()), penalty_tokens.data(),
                                penalty_counts.data(), penalty_tokens.size(), ids.data(),
                                logprobs.data(), &error)) {
      return absl::InternalError(absl::StrCat("sampling on the ", std::string(backend.name()),
                                              " device failed: ", error));
    }
    for (size_t row = 0; row < rows.size(); ++row) {
      drawn[logits_seq[row]].push_back({ids[row], logprobs[row], {}});
    }
  } else {
    for (size_t i = 0; i < scheduled.size(); ++i) {
      if (first_row[i] < 0) continue;
      const SeqState& s = *scheduled[i];
      const uint64_t step = s.tokens.size() - s.prompt_len;  // Index of the token drawn.
      const DraftProposal& proposal = proposals[i];
      float* rows = logits_.data() + static_cast<size_t>(first_row[i]) * vocab;
      if (s.grammar.has_value() || !s.grammar_error.empty()) {
        const auto t0 = std::chrono::steady_clock::now();
        absl::Status masked = s.grammar_error.empty()
                                  ? MaskRows(row_grammars, first_row[i], proposal.tokens.size() + 1,
                                             vocab, rows)
                                  : absl::FailedPreconditionError(s.grammar_error);
        grammar_seconds +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        response->set_grammar_rows(response->grammar_rows() +
                                   static_cast<uint32_t>(proposal.tokens.size() + 1));
        response->set_grammar_seconds(grammar_seconds);
        if (!masked.ok()) {
          // This sequence alone fails; the rest of the step goes on.
          SampledToken failed;
          failed.id = -1;
          drawn[i].push_back(failed);
          errors[i] = std::string(masked.message());
          continue;
        }
      }
      if (proposal.tokens.empty()) {
        drawn[i].push_back(SampleToken(absl::MakeConstSpan(rows, vocab), s.sampling, s.tokens,
                                       s.prompt_len, step));
        continue;
      }
      drawn[i] = VerifyProposal(absl::MakeConstSpan(rows, (proposal.tokens.size() + 1) * vocab),
                                static_cast<int>(vocab), proposal, s.sampling, s.tokens,
                                s.prompt_len, step);
      v1::SpeculationProto* spec = response->add_speculation();
      spec->set_seq_id(request.scheduled_seq_ids(i));
      spec->set_num_proposed(static_cast<uint32_t>(proposal.tokens.size()));
      spec->set_num_accepted(static_cast<uint32_t>(drawn[i].size() - 1));
    }
  }
  for (size_t i = 0; i < scheduled.size(); ++i) {
    for (const SampledToken& t : drawn[i]) {
      v1::SampledTokenProto* out = response->add_sampled();
      out->set_seq_id(request.scheduled_seq_ids(i));
      out->set_token_id(t.id);
      out->set_logprob(t.logprob);
      if (!errors[i].empty()) out->set_error(errors[i]);
      for (const auto& [id, lp] : t.top_logprobs) {
        out->add_top_ids(id);
        out->add_top_logprobs(lp);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera
