#include "coordinator/scheduler/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera::sched {
namespace {

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "Scheduler invariant broken: %s\n", what);
  std::abort();
}

bool Contains(const std::vector<int32_t>& ids, int32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(SchedulerConfig config) {
  if (config.num_blocks < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_blocks is ", config.num_blocks, "; need at least 2 (block 0 is reserved)"));
  }
  if (config.block_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("block_size is ", config.block_size));
  }
  if (config.max_num_seqs < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_num_seqs is ", config.max_num_seqs));
  }
  // Otherwise a full running queue could not all decode in one step.
  if (config.max_num_batched_tokens < config.max_num_seqs) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_num_batched_tokens (", config.max_num_batched_tokens,
                     ") must be at least max_num_seqs (", config.max_num_seqs, ")"));
  }
  if (config.max_num_waiting < 0 || config.max_num_waiting_tokens < 0 || config.priority_aging_arrivals < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_num_waiting (", config.max_num_waiting, "), max_num_waiting_tokens (", config.max_num_waiting_tokens,
        ") and priority_aging_arrivals (", config.priority_aging_arrivals, ") must be >= 0"));
  }
  if (config.num_speculative_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_speculative_tokens is ", config.num_speculative_tokens, "; must be >= 0"));
  }
  if (config.num_host_blocks < 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_host_blocks is ", config.num_host_blocks, "; must be >= 0"));
  }
  if (config.long_prefill_token_threshold < 0 || config.max_model_len < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("long_prefill_token_threshold (", config.long_prefill_token_threshold,
                     ") and max_model_len (", config.max_model_len, ") must be >= 0"));
  }
  return std::unique_ptr<Scheduler>(new Scheduler(std::move(config)));
}

Scheduler::Scheduler(SchedulerConfig config)
    : config_(std::move(config)),
      kv_(config_.num_blocks, config_.block_size, config_.enable_prefix_caching,
          config_.block_hash_fn, config_.num_host_blocks) {}

absl::Status Scheduler::Validate(const Request& request) const {
  const SeqId id = request.seq_id;
  const RequestOptions& options = request.options;
  const int num_prompt = static_cast<int>(request.prompt_token_ids.size());
  if (seqs_.contains(id)) {
    return absl::AlreadyExistsError(absl::StrCat("sequence ", id, " already exists"));
  }
  if (num_prompt == 0) {
    return absl::InvalidArgumentError(absl::StrCat("sequence ", id, " has an empty prompt"));
  }
  for (int32_t token : request.prompt_token_ids) {
    if (token < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", id, " has a negative prompt token id ", token));
    }
  }
  if (options.max_new_tokens < 1 || options.min_new_tokens < 0 ||
      options.min_new_tokens > options.max_new_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence ", id, ": need 0 <= min_new_tokens (", options.min_new_tokens,
        ") <= max_new_tokens (", options.max_new_tokens, ") and max_new_tokens >= 1"));
  }
  if (config_.max_model_len > 0 && num_prompt >= config_.max_model_len) {
    return absl::InvalidArgumentError(absl::StrCat("sequence ", id, " has ", num_prompt,
                                                   " prompt tokens; max_model_len is ",
                                                   config_.max_model_len));
  }
  // The KV of the last sampled token is never computed.
  int64_t max_kv_tokens = static_cast<int64_t>(num_prompt) + options.max_new_tokens - 1;
  if (config_.max_model_len > 0) {
    max_kv_tokens = std::min<int64_t>(max_kv_tokens, config_.max_model_len - 1);
  }
  const int64_t blocks_needed = (max_kv_tokens + config_.block_size - 1) / config_.block_size;
  if (blocks_needed > kv_.pool().num_usable_blocks()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence ", id, " may need ", blocks_needed, " KV blocks (", num_prompt,
        " prompt + ", options.max_new_tokens, " new tokens); the replica has ",
        kv_.pool().num_usable_blocks()));
  }
  return absl::OkStatus();
}

absl::Status Scheduler::AddRequest(Request request) {
  if (absl::Status s = Validate(request); !s.ok()) return s;
  const SeqId id = request.seq_id;
  const int num_prompt = static_cast<int>(request.prompt_token_ids.size());
  if (config_.max_num_waiting > 0 && static_cast<int>(waiting_.size()) >= config_.max_num_waiting) {
    return absl::ResourceExhaustedError(absl::StrCat("the replica's queue is full: ", waiting_.size(),
                                                     " requests waiting, the limit is ", config_.max_num_waiting));
  }
  if (config_.max_num_waiting_tokens > 0 && num_queued_tokens_ + num_prompt > config_.max_num_waiting_tokens) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the replica's queue is full: ", num_queued_tokens_, " queued prompt tokens + ", num_prompt,
        " would pass the limit of ", config_.max_num_waiting_tokens));
  }
  auto seq = std::make_unique<Sequence>();
  seq->id = id;
  seq->options = std::move(request.options);
  seq->token_ids = std::move(request.prompt_token_ids);
  seq->num_prompt_tokens = num_prompt;
  seq->arrival = next_arrival_++;
  Sequence* raw = seq.get();
  seqs_.emplace(id, std::move(seq));
  PushWaiting(raw, /*front=*/false);
  return absl::OkStatus();
}

StepPlan Scheduler::Schedule() {
  Check(!step_in_flight_, "Schedule() called before Update() or FailStep() of the last step");
  StepPlan plan;
  plan.step_id = ++step_id_;
  kv_.BeginStep(step_id_);
  plan.finished_ids = std::move(pending_finished_ids_);
  pending_finished_ids_.clear();
  scheduled_.clear();

  int budget = config_.max_num_batched_tokens;
  PreemptForWaitingHead(plan);
  const bool preempted = ScheduleRunning(budget, plan);
  // Blocks ran out for running sequences: admitting more would only thrash.
  if (!preempted) ScheduleWaiting(budget);
  BuildPlan(plan);
  plan.host_copies = kv_.TakeHostTierCopies();
  counters_.host_tier_saved_blocks += static_cast<int64_t>(plan.host_copies.to_host.size());
  counters_.host_tier_loaded_blocks += static_cast<int64_t>(plan.host_copies.from_host.size());
  in_flight_copies_ = plan.host_copies;
  step_in_flight_ = true;
  return plan;
}

int Scheduler::ChunkSize(int num_uncomputed_tokens, int budget) const {
  int n = std::min(num_uncomputed_tokens, budget);
  if (config_.long_prefill_token_threshold > 0) {
    n = std::min(n, config_.long_prefill_token_threshold);
  }
  return n;
}

int Scheduler::Lookahead(const Sequence& seq, int budget) const {
  if (config_.num_speculative_tokens == 0 || seq.num_uncomputed_tokens() != 1) return 0;
  // The step emits at most 1 + lookahead tokens: never more than the request may still
  // generate, nor past the context limit.
  int n = std::min(config_.num_speculative_tokens, budget);
  n = std::min(n, seq.options.max_new_tokens - seq.num_output_tokens() - 1);
  if (config_.max_model_len > 0) n = std::min(n, config_.max_model_len - seq.num_tokens() - 1);
  return std::max(n, 0);
}

// Priority policy: a waiting sequence that outranks the tail of the running queue takes
// its place when blocks or seats are short. Done before anything is scheduled, so no
// victim is already in the plan; strict priority comparison prevents ping-pong.
void Scheduler::PreemptForWaitingHead(StepPlan& plan) {
  if (config_.policy != SchedulingPolicy::kPriority || waiting_.empty()) return;
  Sequence* head = waiting_.front();
  const ComputedBlocks hits = kv_.GetComputedBlocks(head->token_ids);
  const int n = ChunkSize(head->num_tokens() - hits.num_tokens, config_.max_num_batched_tokens);
  // With aging, rank by the aged key (a fixed total order, so still no ping-pong).
  auto outranks = [this](const Sequence& a, const Sequence& b) {
    return config_.priority_aging_arrivals > 0 ? AgedRank(a) < AgedRank(b) : a.options.priority < b.options.priority;
  };
  while (!running_.empty() && outranks(*head, *running_.back()) &&
         (static_cast<int>(running_.size()) >= config_.max_num_seqs ||
          !kv_.CanAllocate(head->id, hits.num_tokens, n, hits))) {
    Sequence* victim = running_.back();
    running_.pop_back();
    Preempt(victim, plan);
  }
}

// Returns whether a sequence had to be preempted for lack of blocks.
bool Scheduler::ScheduleRunning(int& budget, StepPlan& plan) {
  bool preempted = false;
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* seq = running_[i];
    const int n = ChunkSize(seq->num_uncomputed_tokens(), budget);
    // Speculation only spends budget the running sequences behind this one do not need
    // for a token each: lookahead never pushes a sequence out of the step.
    const int behind = static_cast<int>(running_.size() - i - 1);
    int lookahead = Lookahead(*seq, budget - n - behind);
    // Speculative slots are an extra: without blocks for them the sequence decodes plainly
    // rather than evicting another.
    if (lookahead > 0 && !kv_.AllocateSlots(seq->id, seq->num_computed_tokens, n + lookahead)) {
      lookahead = 0;
    }
    bool preempted_self = false;
    while (lookahead == 0 && !kv_.AllocateSlots(seq->id, seq->num_computed_tokens, n)) {
      // The back has not been scheduled this step: the loop runs front to back.
      Sequence* victim = running_.back();
      running_.pop_back();
      Preempt(victim, plan);
      preempted = true;
      if (victim == seq) {
        preempted_self = true;
        break;
      }
    }
    if (preempted_self) break;
    scheduled_.push_back({seq, n, !seq->known_to_workers, lookahead});
    budget -= n + lookahead;
    counters_.num_lookahead_slots += lookahead;
    ++i;
  }
  return preempted;
}

void Scheduler::ScheduleWaiting(int& budget) {
  while (!waiting_.empty() && budget > 0 &&
         static_cast<int>(running_.size()) + num_transferring_ < config_.max_num_seqs) {
    Sequence* seq = waiting_.front();
    if (seq->preempted_at_step == step_id_) break;  // Not back in the step that evicted it.
    const ComputedBlocks hits = kv_.GetComputedBlocks(seq->token_ids);
    const int n = ChunkSize(seq->num_tokens() - hits.num_tokens, budget);
    if (!kv_.AllocateSlots(seq->id, hits.num_tokens, n, hits)) break;
    waiting_.pop_front();
    num_queued_prompt_blocks_ -= kv_.NumBlocksFor(seq->num_tokens());
    num_queued_tokens_ -= seq->num_tokens();
    seq->num_computed_tokens = hits.num_tokens;
    if (seq->num_cached_tokens < 0) seq->num_cached_tokens = hits.num_tokens;
    const int host_hit_tokens = static_cast<int>(hits.host_slots.size()) * config_.block_size;
    if (config_.enable_prefix_caching) {
      counters_.prefix_cache_queried_tokens += seq->num_tokens();
      counters_.prefix_cache_hit_tokens += hits.num_tokens;
      counters_.host_tier_hit_tokens += host_hit_tokens;
    }
    seq->status = SequenceStatus::kRunning;
    InsertRunning(seq);
    scheduled_.push_back({seq, n, !seq->known_to_workers, 0, host_hit_tokens > 0});
    budget -= n;
  }
}

void Scheduler::BuildPlan(StepPlan& plan) {
  in_flight_.clear();
  // in_flight_ follows the plan's order (new_seqs, then cached_seqs), which is the order
  // the workers answer in.
  for (const bool new_pass : {true, false}) {
    for (const Scheduled& s : scheduled_) {
      Sequence& seq = *s.seq;
      if (s.is_new != new_pass) continue;
      const bool samples = seq.num_computed_tokens + s.num_tokens == seq.num_tokens();
      absl::Span<const BlockId> table = kv_.BlockTable(seq.id);
      if (new_pass) {
        NewSeqData& data = plan.new_seqs.emplace_back();
        data.seq_id = seq.id;
        data.token_ids = seq.token_ids;
        data.block_ids.assign(table.begin(), table.end());
        data.num_computed_tokens = seq.num_computed_tokens;
        data.num_scheduled_tokens = s.num_tokens;
        data.samples_token = samples;
        data.sampling_handle = seq.options.sampling_handle;
        data.num_lookahead_tokens = s.lookahead;
      } else {
        CachedSeqData& data = plan.cached_seqs.emplace_back();
        data.seq_id = seq.id;
        data.new_token_ids.assign(seq.token_ids.begin() + seq.num_tokens_sent,
                                  seq.token_ids.end());
        data.new_block_ids.assign(table.begin() + seq.num_blocks_sent, table.end());
        data.num_computed_tokens = seq.num_computed_tokens;
        data.num_scheduled_tokens = s.num_tokens;
        data.samples_token = samples;
        data.num_lookahead_tokens = s.lookahead;
      }
      seq.known_to_workers = true;
      seq.num_blocks_sent = static_cast<int>(table.size());
      seq.num_tokens_sent = seq.num_tokens();
      plan.total_num_scheduled_tokens += s.num_tokens + s.lookahead;
      in_flight_.push_back({seq.id, s.num_tokens, samples, s.lookahead, s.loads_from_host, {}});
    }
  }
}

// Pairs the step's sampled tokens with its sequences: each sampling sequence gets its
// consecutive entries (one, or with lookahead up to 1 + lookahead). Workers answer in plan
// order, so a straight walk usually does it; otherwise tokens are grouped by sequence id.
absl::Status Scheduler::MatchSampledTokens(const StepResult& result) {
  for (const SampledToken& s : result.sampled) {
    if (s.token_id < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step ", step_id_, ": negative token ", s.token_id, " for sequence ", s.seq_id));
    }
  }
  size_t next = 0;
  for (InFlight& f : in_flight_) {
    f.tokens.clear();
    if (!f.samples_token) continue;
    while (next < result.sampled.size() && result.sampled[next].seq_id == f.seq_id) {
      f.tokens.push_back(result.sampled[next++].token_id);
    }
  }
  if (next != result.sampled.size()) {
    absl::flat_hash_map<SeqId, absl::InlinedVector<int32_t, 1>> by_id;
    for (const SampledToken& s : result.sampled) by_id[s.seq_id].push_back(s.token_id);
    size_t num_matched = 0;
    for (InFlight& f : in_flight_) {
      auto it = f.samples_token ? by_id.find(f.seq_id) : by_id.end();
      f.tokens.clear();
      if (it == by_id.end()) continue;
      f.tokens = it->second;
      ++num_matched;
    }
    if (num_matched != by_id.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step ", step_id_, ": ", by_id.size() - num_matched,
          " sequences got tokens without sampling in this step"));
    }
  }
  for (const InFlight& f : in_flight_) {
    if (!f.samples_token || FindInFlight(f.seq_id) == nullptr) continue;
    if (f.tokens.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("step ", step_id_, ": no sampled token for sequence ", f.seq_id));
    }
    if (static_cast<int>(f.tokens.size()) > 1 + f.lookahead) {
      return absl::InvalidArgumentError(
          absl::StrCat("step ", step_id_, ": ", f.tokens.size(), " tokens for sequence ", f.seq_id,
                       ", which had room for ", 1 + f.lookahead));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SeqEvent>> Scheduler::Update(const StepResult& result) {
  if (!step_in_flight_) {
    return absl::FailedPreconditionError(
        absl::StrCat("no step in flight for the result of step ", result.step_id));
  }
  if (result.step_id != step_id_) {
    return absl::InvalidArgumentError(absl::StrCat("result of step ", result.step_id,
                                                   " but step ", step_id_, " is in flight"));
  }
  // Validate everything before changing anything.
  if (absl::Status status = MatchSampledTokens(result); !status.ok()) return status;

  std::vector<SeqEvent> events;
  bool any_finished = false;
  for (const InFlight& f : in_flight_) {
    Sequence* found = FindInFlight(f.seq_id);
    if (found == nullptr) continue;  // Finished or aborted while the step ran.
    Sequence& seq = *found;
    // Accepted speculative tokens were computed in this step too (their KV is written);
    // the last token of the step is not, as without speculation.
    const int accepted = f.samples_token ? static_cast<int>(f.tokens.size()) - 1 : 0;
    absl::InlinedVector<int32_t, 1> emitted;
    std::optional<FinishReason> stop;
    for (const int32_t token : f.tokens) {
      seq.token_ids.push_back(token);
      emitted.push_back(token);
      stop = CheckStop(seq);
      if (stop.has_value()) break;  // Tokens after a stop are dropped.
    }
    // Blocks are cached up to num_computed_tokens / block_size after every step, so only
    // a step that crosses a block boundary has anything to cache. The tokens the cached
    // blocks hold are all in token_ids by now.
    const int bs = config_.block_size;
    const int computed = seq.num_computed_tokens + f.num_tokens + accepted;
    // Blocks loaded from the host tier hold their KV now, so they join the device pool's
    // prefix cache too.
    const bool filled_a_block = computed / bs > seq.num_computed_tokens / bs || f.loads_from_host;
    seq.num_computed_tokens = std::min(computed, seq.num_tokens());
    if (filled_a_block) kv_.CacheFullBlocks(seq.id, seq.token_ids, seq.num_computed_tokens);
    if (!f.samples_token) continue;
    if (stop.has_value()) {
      events.push_back(Release(seq, *stop));
      any_finished = true;
    } else if (seq.options.prefill_only) {
      events.push_back(Hold(seq));
      any_finished = true;
    } else {
      events.push_back({seq.id, {}, std::nullopt, seq.num_output_tokens(), seq.num_cached_tokens});
    }
    events.back().new_token_ids = std::move(emitted);
  }
  if (any_finished) EraseFinished();
  step_in_flight_ = false;
  return events;
}

std::vector<SeqEvent> Scheduler::FailStep() {
  std::vector<SeqEvent> events;
  if (!step_in_flight_) return events;
  kv_.StepFailed(in_flight_copies_);
  for (const InFlight& f : in_flight_) {
    Sequence* seq = FindInFlight(f.seq_id);
    if (seq != nullptr) events.push_back(Release(*seq, FinishReason::kError));
  }
  EraseFinished();
  step_in_flight_ = false;
  return events;
}

absl::Status Scheduler::Finish(SeqId seq_id, FinishReason reason) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) {
    return absl::NotFoundError(absl::StrCat("no live sequence ", seq_id));
  }
  Sequence* seq = it->second.get();
  if (seq->status == SequenceStatus::kTransferring) {
    seq->finish_after_transfer = true;
    return absl::OkStatus();
  }
  if (seq->status == SequenceStatus::kHeld) {
    --num_held_;
  } else if (seq->status == SequenceStatus::kWaiting) {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), seq));
    num_queued_prompt_blocks_ -= kv_.NumBlocksFor(seq->num_tokens());
    num_queued_tokens_ -= seq->num_tokens();
  } else {
    running_.erase(std::find(running_.begin(), running_.end(), seq));
  }
  Release(*seq, reason);
  seqs_.erase(it);
  return absl::OkStatus();
}

bool Scheduler::HasWork() const {
  return !running_.empty() || !waiting_.empty() || !pending_finished_ids_.empty();
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s = counters_;
  s.num_running = static_cast<int>(running_.size());
  s.num_held = num_held_;
  s.num_transferring = num_transferring_;
  s.num_waiting = static_cast<int>(waiting_.size());
  s.num_free_blocks = kv_.num_free_blocks();
  s.num_usable_blocks = kv_.pool().num_usable_blocks();
  s.kv_cache_usage = kv_.usage();
  if (const HostBlockPool* host = kv_.host_pool(); host != nullptr) {
    s.num_host_blocks_used = host->num_used_slots();
    s.num_host_blocks = host->num_slots();
  }
  return s;
}

int Scheduler::NumCachedPrefixBlocks(absl::Span<const int32_t> tokens) const {
  return static_cast<int>(kv_.GetComputedBlocks(tokens).block_ids.size());
}

// A sequence of the step in flight that is still running. Finished ones are gone; one
// with a reused id is waiting (nothing is admitted between Schedule and Update).
Sequence* Scheduler::FindInFlight(SeqId seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end() || it->second->status != SequenceStatus::kRunning) return nullptr;
  return it->second.get();
}

const Sequence* Scheduler::GetSequence(SeqId seq_id) const {
  auto it = seqs_.find(seq_id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

// Recompute preemption: blocks go back tail first, the KV is rebuilt from all tokens
// (prompt and generated) when the sequence is admitted again.
void Scheduler::Preempt(Sequence* seq, StepPlan& plan) {
  kv_.Free(seq->id);
  seq->num_computed_tokens = 0;
  seq->preempted_at_step = step_id_;
  if (seq->known_to_workers) plan.preempted_ids.push_back(seq->id);
  seq->known_to_workers = false;
  seq->num_blocks_sent = 0;
  seq->num_tokens_sent = 0;
  ++counters_.num_preemptions;
  PushWaiting(seq, /*front=*/true);
}

bool Scheduler::RanksBefore(const Sequence& a, const Sequence& b) const {
  if (config_.policy == SchedulingPolicy::kPriority && config_.priority_aging_arrivals > 0) {
    return AgedRank(a) < AgedRank(b) || (AgedRank(a) == AgedRank(b) && a.arrival < b.arrival);
  }
  if (config_.policy == SchedulingPolicy::kPriority &&
      a.options.priority != b.options.priority) {
    return a.options.priority < b.options.priority;
  }
  return a.arrival < b.arrival;
}

int64_t Scheduler::AgedRank(const Sequence& s) const {
  return int64_t{s.options.priority} * config_.priority_aging_arrivals + static_cast<int64_t>(s.arrival);
}

void Scheduler::PushWaiting(Sequence* seq, bool front) {
  seq->status = SequenceStatus::kWaiting;
  num_queued_prompt_blocks_ += kv_.NumBlocksFor(seq->num_tokens());
  num_queued_tokens_ += seq->num_tokens();
  if (config_.policy == SchedulingPolicy::kPriority) {
    auto pos = std::upper_bound(
        waiting_.begin(), waiting_.end(), seq,
        [this](const Sequence* a, const Sequence* b) { return RanksBefore(*a, *b); });
    waiting_.insert(pos, seq);
  } else if (front) {
    waiting_.push_front(seq);
  } else {
    waiting_.push_back(seq);
  }
}

void Scheduler::InsertRunning(Sequence* seq) {
  if (config_.policy != SchedulingPolicy::kPriority) {
    running_.push_back(seq);
    return;
  }
  auto pos = std::upper_bound(
      running_.begin(), running_.end(), seq,
      [this](const Sequence* a, const Sequence* b) { return RanksBefore(*a, *b); });
  running_.insert(pos, seq);
}

SeqEvent Scheduler::Release(Sequence& seq, FinishReason reason) {
  kv_.Free(seq.id);
  if (seq.known_to_workers) pending_finished_ids_.push_back(seq.id);
  seq.status = SequenceStatus::kFinished;
  return {seq.id, {}, reason, seq.num_output_tokens(),
          std::max(seq.num_cached_tokens, 0)};
}

void Scheduler::EraseFinished() {
  std::erase_if(running_, [](const Sequence* s) { return s->status != SequenceStatus::kRunning; });
  std::erase_if(waiting_, [](const Sequence* s) { return s->status == SequenceStatus::kFinished; });
  absl::erase_if(seqs_, [](const auto& entry) {
    return entry.second->status == SequenceStatus::kFinished;
  });
}

SeqEvent Scheduler::Hold(Sequence& seq) {
  // The workers drop the sequence; its KV stays in the blocks the coordinator keeps.
  if (seq.known_to_workers) pending_finished_ids_.push_back(seq.id);
  seq.known_to_workers = false;
  seq.num_blocks_sent = 0;
  seq.num_tokens_sent = 0;
  seq.status = SequenceStatus::kHeld;
  ++num_held_;
  SeqEvent event{seq.id, {}, std::nullopt, seq.num_output_tokens(), std::max(seq.num_cached_tokens, 0)};
  event.handed_off = true;
  return event;
}

absl::Status Scheduler::ReleaseHeld(SeqId seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end() || it->second->status != SequenceStatus::kHeld) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", seq_id, " is not held for a KV transfer"));
  }
  kv_.Free(seq_id);
  --num_held_;
  seqs_.erase(it);
  return absl::OkStatus();
}

absl::Status Scheduler::ResumeHeld(SeqId seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end() || it->second->status != SequenceStatus::kHeld) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", seq_id, " is not held for a KV transfer"));
  }
  Sequence& seq = *it->second;
  --num_held_;
  seq.options.prefill_only = false;
  seq.status = SequenceStatus::kRunning;
  InsertRunning(&seq);  // Goes to the workers as new, num_computed_tokens intact.
  return absl::OkStatus();
}

absl::StatusOr<Handoff> Scheduler::AddHandoff(Request request, absl::Span<const int32_t> output) {
  if (absl::Status s = Validate(request); !s.ok()) return s;
  const SeqId id = request.seq_id;
  if (output.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("handoff of sequence ", id, " without its first token"));
  }
  if (static_cast<int>(running_.size()) + num_transferring_ >= config_.max_num_seqs) {
    return absl::ResourceExhaustedError(
        absl::StrCat("all ", config_.max_num_seqs, " sequence seats (max_num_seqs) are taken"));
  }
  const int num_prompt = static_cast<int>(request.prompt_token_ids.size());
  // Hits in this replica's device pool need no transfer. Host-tier hits would be loaded by
  // a step, and the transfer lands outside steps, so they are not used.
  ComputedBlocks hits = kv_.GetComputedBlocks(request.prompt_token_ids);
  hits.host_slots.clear();
  hits.num_tokens = static_cast<int>(hits.block_ids.size()) * config_.block_size;
  if (!kv_.AllocateSlots(id, hits.num_tokens, num_prompt - hits.num_tokens, hits)) {
    return absl::ResourceExhaustedError(absl::StrCat("not enough free KV blocks for the ", num_prompt,
                                                     " prompt tokens of sequence ", id));
  }
  // Cached blocks this allocation evicted would be saved to the host tier at the start of
  // the next step, while the transfer may already be overwriting them: they are dropped.
  kv_.StepFailed(kv_.TakeHostTierCopies());
  auto seq = std::make_unique<Sequence>();
  seq->id = id;
  seq->options = std::move(request.options);
  seq->options.prefill_only = false;
  seq->token_ids = std::move(request.prompt_token_ids);
  seq->token_ids.insert(seq->token_ids.end(), output.begin(), output.end());
  seq->num_prompt_tokens = num_prompt;
  seq->num_computed_tokens = hits.num_tokens;
  seq->num_cached_tokens = hits.num_tokens;
  seq->arrival = next_arrival_++;
  seq->status = SequenceStatus::kTransferring;
  if (config_.enable_prefix_caching) {
    counters_.prefix_cache_queried_tokens += num_prompt;
    counters_.prefix_cache_hit_tokens += hits.num_tokens;
  }
  ++num_transferring_;
  Handoff handoff;
  handoff.first_block = static_cast<int>(hits.block_ids.size());
  absl::Span<const BlockId> table = kv_.BlockTable(id);
  handoff.block_ids.assign(table.begin() + handoff.first_block, table.end());
  seqs_.emplace(id, std::move(seq));
  return handoff;
}

absl::Status Scheduler::HandoffDone(SeqId seq_id, bool ok) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end() || it->second->status != SequenceStatus::kTransferring) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", seq_id, " is not waiting for a KV transfer"));
  }
  Sequence& seq = *it->second;
  --num_transferring_;
  if (seq.finish_after_transfer) {
    kv_.Free(seq_id);
    seqs_.erase(it);
    return absl::OkStatus();
  }
  if (ok) {
    // The KV is whole now, so its full blocks may serve other sequences' prefixes.
    seq.num_computed_tokens = seq.num_prompt_tokens;
    kv_.CacheFullBlocks(seq_id, seq.token_ids, seq.num_computed_tokens);
    seq.status = SequenceStatus::kRunning;
    InsertRunning(&seq);
    return absl::OkStatus();
  }
  kv_.Free(seq_id);
  seq.num_computed_tokens = 0;
  PushWaiting(&seq, /*front=*/true);
  return absl::OkStatus();
}

std::optional<FinishReason> Scheduler::CheckStop(const Sequence& seq) const {
  const int32_t last = seq.token_ids.back();
  if (seq.num_output_tokens() >= seq.options.min_new_tokens) {
    if (!seq.options.ignore_eos && Contains(config_.eos_token_ids, last)) {
      return FinishReason::kEos;
    }
    if (Contains(seq.options.stop_token_ids, last)) return FinishReason::kStop;
  }
  if (seq.num_output_tokens() >= seq.options.max_new_tokens) return FinishReason::kLength;
  if (config_.max_model_len > 0 && seq.num_tokens() >= config_.max_model_len) {
    return FinishReason::kLength;
  }
  return std::nullopt;
}

}  // namespace tessera::sched
