#include "coordinator/engine/engine.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "coordinator/engine/step_request.h"
#include "coordinator/metrics/engine_metrics.h"
#include "coordinator/metrics/request_log.h"
#include "coordinator/scheduler/router.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

Engine::Engine(const Tokenizer* tokenizer, EngineOptions options)
    : tokenizer_(tokenizer), options_(std::move(options)) {
  loop_ = std::thread([this] { Loop(); });
}

Engine::~Engine() { Stop(); }

void Engine::Stop() {
  {
    absl::MutexLock lock(&inbox_mu_);
    if (stop_) {
      if (loop_.joinable()) loop_.join();
      return;
    }
    stop_ = true;
  }
  if (loop_.joinable()) loop_.join();
}

void Engine::Post(Message m) {
  absl::MutexLock lock(&inbox_mu_);
  inbox_.push_back(std::move(m));
}

void Engine::AddReplica(std::unique_ptr<WorkerGroup> group, int num_blocks, int num_host_blocks) {
  Post(ReplicaAdded{std::move(group), num_blocks, num_host_blocks});
}

void Engine::FailReplica(int replica, absl::Status reason) {
  Post(ReplicaFailed{replica, std::move(reason)});
}

absl::StatusOr<uint64_t> Engine::Submit(EngineRequest request) {
  // Counted before the draining check: a drain that sets draining_ and then reads zero
  // cannot miss a request admitted at the same moment.
  active_requests_.fetch_add(1);
  if (draining_.load()) {
    active_requests_.fetch_sub(1);
    return absl::UnavailableError(
        "the coordinator is draining (shutting down) and admits no new requests; retry on another coordinator");
  }
  if (num_ready_.load() == 0) {
    active_requests_.fetch_sub(1);
    return absl::UnavailableError("no model replica is ready: no complete worker group");
  }
  const uint64_t id = next_seq_id_.fetch_add(1);
  Post(NewRequest{id, std::move(request), Clock::now()});
  return id;
}

void Engine::Cancel(uint64_t seq_id) { Post(CancelRequest{seq_id}); }

void Engine::BeginDrain() {
  if (!draining_.exchange(true)) {
    std::fprintf(stderr, "tessera-coordinator: draining: %d admitted requests still running\n",
                 active_requests_.load());
  }
}

std::vector<ReplicaSnapshot> Engine::Snapshot() const {
  absl::MutexLock lock(&snapshot_mu_);
  return snapshot_;
}

void Engine::Loop() {
  while (true) {
    std::deque<Message> batch;
    {
      absl::MutexLock lock(&inbox_mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(inbox_mu_) {
        return stop_ || !inbox_.empty();
      };
      inbox_mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(50));
      if (stop_) break;
      batch.swap(inbox_);
    }
    for (Message& m : batch) std::visit([this](auto& msg) { Handle(msg); }, m);
    ExpireDeadlines();
    PlaceHeldSequences();
    for (auto& r : replicas_) {
      if (r == nullptr || !r->ready || r->in_flight) continue;
      if (r->scheduler->HasWork()) {
        Dispatch(*r);
      } else {
        MaybeProbe(*r);
      }
    }
    PublishSnapshot();
  }
  // Let calls in flight end before the replicas (and their stubs) go away.
  for (auto& r : replicas_) {
    if (r != nullptr && r->call.valid()) r->call.wait();
  }
  for (auto& t : transfers_) t.wait();
  for (auto& [id, live] : live_) {
    live.request.stream->Push(
        RequestEvent::Failure(absl::UnavailableError("the coordinator is shutting down")));
  }
  live_.clear();
  active_requests_.store(0);
}

void Engine::Handle(NewRequest& m) {
  std::vector<sched::Scheduler*> schedulers;
  std::vector<int> indices;
  for (Replica* r : EntryReplicas()) {
    schedulers.push_back(r->scheduler.get());
    indices.push_back(r->index);
  }
  Live live;
  live.request = std::move(m.request);
  live.arrival = m.arrival;
  if (!live.request.grammar_gbnf.empty()) {
    // The output may end (EOS, a stop token id) exactly where its grammar is complete.
    auto grammar = std::make_shared<v1::GrammarConstraint>();
    grammar->set_gbnf(live.request.grammar_gbnf);
    for (const int32_t id : options_.eos_token_ids) grammar->add_end_token_ids(id);
    for (const int32_t id : live.request.options.stop_token_ids) grammar->add_end_token_ids(id);
    live.grammar = std::move(grammar);
  }
  if (schedulers.empty()) {
    if (options_.metrics != nullptr) options_.metrics->RequestRejected("unavailable", live.request.protocol);
    live.request.stream->Push(RequestEvent::Failure(
        absl::UnavailableError("no model replica is ready: no complete worker group")));
    active_requests_.fetch_sub(1);
    return;
  }
  if (live.request.deadline <= Clock::now()) {
    if (options_.metrics != nullptr) options_.metrics->RequestAborted("deadline_in_queue", live.request.protocol);
    live.request.stream->Push(RequestEvent::Failure(
        absl::DeadlineExceededError("the request's deadline passed before it was scheduled")));
    active_requests_.fetch_sub(1);
    return;
  }
  sched::Router router(schedulers, {options_.router_load_weight});
  const int pick = router.Route(live.request.prompt);
  // The router's pick first; when its queue is full, any other replica with room.
  std::vector<int> order = {pick};
  for (int i = 0; i < static_cast<int>(schedulers.size()); ++i) {
    if (i != pick) order.push_back(i);
  }
  Replica* replica = nullptr;
  absl::Status refused;
  for (int i : order) {
    sched::Request req;
    req.seq_id = m.seq_id;
    req.prompt_token_ids = live.request.prompt;
    req.options = live.request.options;
    req.options.sampling_handle = m.seq_id;
    req.options.prefill_only = HandsOff(*replicas_[indices[i]]);
    refused = replicas_[indices[i]]->scheduler->AddRequest(std::move(req));
    if (refused.ok()) {
      replica = replicas_[indices[i]].get();
      break;
    }
    if (!absl::IsResourceExhausted(refused)) break;  // The request itself is at fault.
  }
  if (replica == nullptr) {
    if (options_.metrics != nullptr) {
      options_.metrics->RequestRejected(absl::IsResourceExhausted(refused) ? "queue_full" : "unschedulable",
                                        live.request.protocol);
    }
    live.request.stream->Push(RequestEvent::Failure(refused));
    active_requests_.fetch_sub(1);
    return;
  }
  live.replica = replica->index;
  if (live.request.deadline != Clock::time_point::max()) {
    live.deadline_entry = deadlines_.emplace(live.request.deadline, m.seq_id);
    live.has_deadline = true;
  }
  live.output = std::make_unique<OutputProcessor>(tokenizer_, live.request.prompt,
                                                  live.request.stop_strings);
  live.admitted = true;
  live_.emplace(m.seq_id, std::move(live));
}

void Engine::Handle(CancelRequest& m) {
  auto it = live_.find(m.seq_id);
  if (it == live_.end()) return;
  Replica* r = replicas_[it->second.replica].get();
  if (r != nullptr && r->scheduler != nullptr) r->scheduler->Abort(m.seq_id).IgnoreError();
  Finish(m.seq_id, sched::FinishReason::kCancelled, absl::CancelledError("cancelled by the client"));
}

void Engine::Handle(ReplicaAdded& m) {
  const int index = m.group->replica();
  if (static_cast<int>(replicas_.size()) <= index) replicas_.resize(index + 1);
  auto r = std::make_unique<Replica>();
  r->index = index;
  r->role = RoleOf(index);
  r->epoch = next_epoch_++;
  sched::SchedulerConfig config;
  config.num_blocks = m.num_blocks;
  config.block_size = options_.block_size;
  config.max_num_batched_tokens = options_.max_num_batched_tokens;
  config.max_num_seqs = options_.max_num_seqs;
  config.max_model_len = options_.max_model_len;
  config.policy = options_.policy;
  config.enable_prefix_caching = options_.enable_prefix_caching;
  config.eos_token_ids = options_.eos_token_ids;
  config.max_num_waiting = options_.max_queued_requests;
  config.max_num_waiting_tokens = options_.max_queued_tokens;
  config.priority_aging_arrivals = options_.priority_aging_arrivals;
  config.num_speculative_tokens = options_.num_speculative_tokens;
  config.num_host_blocks = m.num_host_blocks;
  auto scheduler = sched::Scheduler::Create(config);
  if (!scheduler.ok()) {
    std::fprintf(stderr, "tessera-coordinator: replica %d: %s\n", index,
                 std::string(scheduler.status().message()).c_str());
    return;
  }
  r->scheduler = std::move(*scheduler);
  r->group = std::move(m.group);
  r->ready = true;
  r->last_contact = Clock::now();
  if (replicas_[index] != nullptr && replicas_[index]->call.valid()) replicas_[index]->call.wait();
  replicas_[index] = std::move(r);
  num_ready_.fetch_add(1);
  std::fprintf(stderr, "tessera-coordinator: replica %d ready (role %s, tp=%d, %d KV blocks, %d in the host tier)\n",
               index, std::string(ReplicaRoleName(replicas_[index]->role)).c_str(),
               replicas_[index]->group->world_size(), m.num_blocks, m.num_host_blocks);
  if (options_.metrics != nullptr) {
    options_.metrics->ReplicaAdded(index, replicas_[index]->group->world_size(),
                                   ReplicaRoleName(replicas_[index]->role));
    StartWarmup(*replicas_[index]);
  }
}

// A one-token generation through the scheduler and every rank, so readiness means "this
// group completed a real forward pass", not merely "its ranks answer RPCs".
void Engine::StartWarmup(Replica& r) {
  const uint64_t id = next_seq_id_.fetch_add(1);
  const int32_t bos = tokenizer_->bos_id();
  Live live;
  live.warmup = true;
  live.replica = r.index;
  live.arrival = Clock::now();
  live.request.request_id = absl::StrCat("warmup-replica-", r.index);
  live.request.prompt = {bos >= 0 ? bos : 0};
  live.request.options.max_new_tokens = 1;
  live.request.options.ignore_eos = true;
  live.request.sampling.temperature = 0.0f;
  live.request.stream = std::make_shared<RequestStream>();
  sched::Request req;
  req.seq_id = id;
  req.prompt_token_ids = live.request.prompt;
  req.options = live.request.options;
  req.options.sampling_handle = id;
  if (absl::Status s = r.scheduler->AddRequest(std::move(req)); !s.ok()) {
    std::fprintf(stderr, "tessera-coordinator: replica %d: warm-up request refused: %s\n", r.index,
                 std::string(s.message()).c_str());
    return;
  }
  live.output = std::make_unique<OutputProcessor>(tokenizer_, live.request.prompt,
                                                  live.request.stop_strings);
  live_.emplace(id, std::move(live));
}

void Engine::Handle(ReplicaFailed& m) {
  if (m.replica < static_cast<int>(replicas_.size()) && replicas_[m.replica] != nullptr) {
    FailReplicaNow(*replicas_[m.replica], m.reason);
  }
}

void Engine::FailReplicaNow(Replica& r, const absl::Status& reason) {
  if (!r.ready) return;
  r.ready = false;
  num_ready_.fetch_sub(1);
  std::fprintf(stderr, "tessera-coordinator: replica %d failed: %s\n", r.index,
               std::string(reason.message()).c_str());
  if (options_.metrics != nullptr) options_.metrics->ReplicaFailed(r.index, reason.message());
  std::vector<uint64_t> ids;
  for (const auto& [id, live] : live_) {
    if (live.replica == r.index) ids.push_back(id);
  }
  for (uint64_t id : ids) {
    Finish(id, sched::FinishReason::kError,
           absl::UnavailableError(absl::StrCat("replica ", r.index, " failed: ", reason.message())));
  }
}

void Engine::Dispatch(Replica& r) {
  r.plan = r.scheduler->Schedule();
  for (const auto& n : r.plan.new_seqs) {
    auto it = live_.find(n.seq_id);
    if (it != live_.end() && !it->second.scheduled) {
      it->second.scheduled = true;
      it->second.first_scheduled = Clock::now();
    }
  }
  v1::StepRequest request = ToStepRequest(r.plan, [this](uint64_t seq_id) -> const SamplingParams* {
    auto it = live_.find(seq_id);
    return it == live_.end() ? nullptr : &it->second.request.sampling;
  }, [this](uint64_t seq_id) {
    auto it = live_.find(seq_id);
    return it == live_.end() ? 0 : static_cast<int>(it->second.request.prompt.size());
  }, [this](uint64_t seq_id) -> const v1::GrammarConstraint* {
    auto it = live_.find(seq_id);
    return it == live_.end() ? nullptr : it->second.grammar.get();
  });
  r.in_flight = true;
  WorkerGroup* group = r.group.get();
  const int index = r.index;
  r.call = std::async(std::launch::async, [this, group, index, request = std::move(request)] {
    Post(StepDone{index, group->ExecuteStep(request)});
  });
}

void Engine::MaybeProbe(Replica& r) {
  if (Clock::now() - r.last_contact < heartbeat_) return;
  r.in_flight = true;
  r.last_contact = Clock::now();
  WorkerGroup* group = r.group.get();
  const int index = r.index;
  const auto timeout = heartbeat_;
  r.call = std::async(std::launch::async, [this, group, index, timeout] {
    Post(ProbeDone{index, group->Probe(timeout)});
  });
}

void Engine::Handle(ProbeDone& m) {
  Replica& r = *replicas_[m.replica];
  r.in_flight = false;
  if (!m.status.ok()) FailReplicaNow(r, m.status);
}

void Engine::Handle(StepDone& m) {
  Replica& r = *replicas_[m.replica];
  r.in_flight = false;
  r.last_contact = Clock::now();
  if (!r.ready) return;
  if (!m.result.ok()) {
    r.scheduler->FailStep();
    FailReplicaNow(r, m.result.status());
    return;
  }
  sched::StepResult result;
  result.step_id = r.plan.step_id;
  // A sequence the worker could not go on with (its grammar) fails alone; the step's
  // other sequences take their tokens as usual.
  for (const auto& s : m.result->sampled()) {
    if (!s.error().empty()) {
      r.scheduler->Finish(s.seq_id(), sched::FinishReason::kError).IgnoreError();
      Finish(s.seq_id(), sched::FinishReason::kError,
             absl::FailedPreconditionError(absl::StrCat("structured output: ", s.error())));
      continue;
    }
    result.sampled.push_back({static_cast<sched::SeqId>(s.seq_id()), s.token_id()});
  }
  auto events = r.scheduler->Update(result);
  if (!events.ok()) {
    r.scheduler->FailStep();
    FailReplicaNow(r, events.status());
    return;
  }
  if (options_.metrics != nullptr) {
    options_.metrics->StepSucceeded(r.index, r.plan.total_num_scheduled_tokens);
    for (const v1::SpeculationProto& spec : m.result->speculation()) {
      options_.metrics->SpeculationObserved(r.index, static_cast<int>(spec.num_proposed()),
                                            static_cast<int>(spec.num_accepted()));
    }
  }
  ApplyEvents(r, *events, &*m.result);
}

void Engine::ApplyEvents(Replica& r, const std::vector<sched::SeqEvent>& events,
                         const v1::StepResponse* response) {
  // A sequence's tokens arrive as consecutive entries, in order (several with speculation).
  std::unordered_map<uint64_t, std::vector<const v1::SampledTokenProto*>> sampled;
  for (const auto& s : response->sampled()) sampled[s.seq_id()].push_back(&s);
  for (const sched::SeqEvent& ev : events) {
    auto it = live_.find(ev.seq_id);
    if (it == live_.end()) continue;
    Live& live = it->second;
    live.cached_tokens = std::max(live.cached_tokens, ev.num_cached_tokens);
    RequestEvent out;
    const auto protos = sampled.find(ev.seq_id);
    bool stopped_by_string = false;
    const auto now = Clock::now();
    // Tokens of one step (several with speculation) share the time since the last one, so
    // the inter-token histogram keeps meaning time per output token.
    const double share = live.completion_tokens > 0 && !ev.new_token_ids.empty()
                             ? Seconds(now - live.last_token) / ev.new_token_ids.size()
                             : 0.0;
    for (size_t k = 0; k < ev.new_token_ids.size(); ++k) {
      const int32_t token = ev.new_token_ids[k];
      if (live.completion_tokens == 0) {
        live.first_token = now;
      } else if (options_.metrics != nullptr && !live.warmup) {
        options_.metrics->TokenEmitted(live.replica, share);
      }
      live.last_token = now;
      ++live.completion_tokens;
      out.token_ids.push_back(token);
      out.text += live.output->Append(token);
      if (live.request.sampling.num_logprobs > 0) {
        TokenLogprobs lp;
        lp.token_id = token;
        if (protos != sampled.end() && k < protos->second.size()) {
          const v1::SampledTokenProto& s = *protos->second[k];
          lp.logprob = s.logprob();
          for (int i = 0; i < s.top_ids_size(); ++i) lp.top.emplace_back(s.top_ids(i), s.top_logprobs(i));
        }
        out.logprobs.push_back(std::move(lp));
      }
      if (live.output->stopped()) {
        stopped_by_string = true;
        break;  // Tokens after a stop string are not part of the output.
      }
    }
    if (stopped_by_string && !ev.finish_reason.has_value()) {
      if (!Deliver(r, ev.seq_id, std::move(out))) continue;
      r.scheduler->Finish(ev.seq_id, sched::FinishReason::kStop).IgnoreError();
      Finish(ev.seq_id, sched::FinishReason::kStop, absl::OkStatus());
      continue;
    }
    if (ev.finish_reason.has_value()) {
      out.text += live.output->Flush();
      if ((!out.token_ids.empty() || !out.text.empty()) && !Deliver(r, ev.seq_id, std::move(out))) continue;
      Finish(ev.seq_id, *ev.finish_reason,
             *ev.finish_reason == sched::FinishReason::kError
                 ? absl::InternalError("the step of this request failed")
                 : absl::OkStatus());
      continue;
    }
    if (!out.token_ids.empty() && !Deliver(r, ev.seq_id, std::move(out))) continue;
    if (ev.handed_off) held_.push_back({static_cast<uint64_t>(ev.seq_id), r.index, r.epoch});
  }
}

bool Engine::Deliver(Replica& r, uint64_t seq_id, RequestEvent event) {
  Live& live = live_.at(seq_id);
  RequestStream& stream = *live.request.stream;
  if (stream.Push(std::move(event))) return true;
  // The client stopped reading: end the request now so its blocks go back to the pool.
  r.scheduler->Abort(seq_id).IgnoreError();
  Log(LogLevel::kWarning, "tessera-coordinator", "request cancelled: its client is not reading",
      {{"request_id", live.request.request_id},
       {"undelivered_tokens", int64_t{stream.num_undelivered_tokens()}},
       {"limit", int64_t{stream.max_undelivered_tokens()}}});
  if (options_.metrics != nullptr) options_.metrics->RequestAborted("client_not_reading", live.request.protocol);
  Finish(seq_id, sched::FinishReason::kError,
         absl::ResourceExhaustedError(absl::StrCat(
             "the client did not read its stream: ", stream.max_undelivered_tokens(),
             " generated tokens were waiting to be sent (--max-undelivered-tokens); the request was cancelled")));
  stream.Interrupt();
  return false;
}

void Engine::Finish(uint64_t seq_id, sched::FinishReason reason, absl::Status error) {
  auto it = live_.find(seq_id);
  if (it == live_.end()) return;
  Live& live = it->second;
  const auto now = Clock::now();
  RequestEvent e;
  e.finished = true;
  e.finish_reason = reason;
  e.error = std::move(error);
  e.prompt_tokens = static_cast<int>(live.request.prompt.size());
  e.completion_tokens = live.completion_tokens;
  e.cached_prompt_tokens = live.cached_tokens;
  e.replica = live.replica;
  e.queue_seconds = live.scheduled ? Seconds(live.first_scheduled - live.arrival) : Seconds(now - live.arrival);
  e.ttft_seconds = live.completion_tokens > 0 ? Seconds(live.first_token - live.arrival) : 0;
  e.total_seconds = Seconds(now - live.arrival);
  if (options_.metrics != nullptr && !live.warmup) {
    FinishedRequestRecord rec;
    rec.request_id = live.request.request_id;
    rec.protocol = live.request.protocol;
    rec.replica = live.replica;
    rec.finish_reason = std::string(sched::FinishReasonName(reason));
    rec.prompt_tokens = e.prompt_tokens;
    rec.generation_tokens = e.completion_tokens;
    rec.cached_prompt_tokens = e.cached_prompt_tokens;
    rec.queue_seconds = e.queue_seconds;
    rec.e2e_seconds = e.total_seconds;
    if (live.completion_tokens > 0) {
      rec.ttft_seconds = e.ttft_seconds;
      if (live.scheduled) rec.prefill_seconds = Seconds(live.first_token - live.first_scheduled);
      rec.decode_seconds = Seconds(now - live.first_token);
    }
    options_.metrics->RequestFinished(rec);
    LogFinishedRequest(rec);
  }
  live.request.stream->Push(std::move(e));
  if (live.admitted) active_requests_.fetch_sub(1);
  if (live.has_deadline) deadlines_.erase(live.deadline_entry);
  live_.erase(it);
}

void Engine::ExpireDeadlines() {
  const auto now = Clock::now();
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const uint64_t seq_id = deadlines_.begin()->second;
    auto it = live_.find(seq_id);
    if (it == live_.end()) {  // Cannot happen: Finish erases the entry. Do not spin.
      deadlines_.erase(deadlines_.begin());
      continue;
    }
    Live& live = it->second;
    const bool started = live.scheduled;
    Replica* r = live.replica >= 0 ? replicas_[live.replica].get() : nullptr;
    if (r != nullptr && r->scheduler != nullptr) r->scheduler->Abort(seq_id).IgnoreError();
    if (options_.metrics != nullptr) {
      options_.metrics->RequestAborted(started ? "deadline" : "deadline_in_queue", live.request.protocol);
    }
    Finish(seq_id, sched::FinishReason::kCancelled,
           absl::DeadlineExceededError(started ? "the request's deadline passed while it ran"
                                               : "the request's deadline passed before it was scheduled"));
  }
}

void Engine::PublishSnapshot() {
  std::vector<ReplicaSnapshot> snap;
  for (const auto& r : replicas_) {
    if (r == nullptr || r->scheduler == nullptr) continue;
    const sched::SchedulerStats s = r->scheduler->stats();
    snap.push_back({r->index, r->ready, s.num_usable_blocks, s.num_free_blocks, s.num_running,
                    s.num_waiting, r->group->startup(), s.num_host_blocks, s.num_host_blocks_used, r->role});
    if (options_.metrics != nullptr && r->ready) options_.metrics->UpdateScheduler(r->index, s);
  }
  if (options_.metrics != nullptr) options_.metrics->LoopTick();
  absl::MutexLock lock(&snapshot_mu_);
  snapshot_ = std::move(snap);
}

}  // namespace tessera
