#include "coordinator/api/generation_service.h"

#include <limits>
#include <optional>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "coordinator/api/token_offsets.h"
#include "coordinator/engine/output_processor.h"
#include "coordinator/metrics/engine_metrics.h"

namespace tessera {
namespace {

v1::FinishReason ToProto(sched::FinishReason r) {
  switch (r) {
    case sched::FinishReason::kLength: return v1::FINISH_REASON_LENGTH;
    case sched::FinishReason::kStop: return v1::FINISH_REASON_STOP;
    case sched::FinishReason::kEos: return v1::FINISH_REASON_EOS;
    case sched::FinishReason::kCancelled: return v1::FINISH_REASON_CANCELLED;
    case sched::FinishReason::kError: return v1::FINISH_REASON_ERROR;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

void AddLogprobs(const RequestEvent& e, google::protobuf::RepeatedPtrField<v1::TokenLogprob>* out) {
  for (const TokenLogprobs& lp : e.logprobs) {
    v1::TokenLogprob* t = out->Add();
    t->set_token_id(lp.token_id);
    t->set_logprob(lp.logprob);
    for (const auto& [id, p] : lp.top) {
      v1::TopLogprob* top = t->add_top();
      top->set_token_id(id);
      top->set_logprob(p);
    }
  }
}

template <typename Response>
void SetSummary(const RequestEvent& e, Response* r) {
  r->set_finish_reason(ToProto(e.finish_reason));
  r->mutable_usage()->set_prompt_tokens(e.prompt_tokens);
  r->mutable_usage()->set_completion_tokens(e.completion_tokens);
  r->mutable_usage()->set_cached_prompt_tokens(e.cached_prompt_tokens);
  r->mutable_timings()->set_queue_seconds(e.queue_seconds);
  r->mutable_timings()->set_time_to_first_token_seconds(e.ttft_seconds);
  r->mutable_timings()->set_total_seconds(e.total_seconds);
}

constexpr auto kPollInterval = std::chrono::milliseconds(20);

// Whether the client's call is over (cancelled, or past its deadline): the status to end
// the handler with, or nothing while it is still wanted.
std::optional<grpc::Status> CallEnded(grpc::ServerContext& context) {
  if (context.deadline() <= std::chrono::system_clock::now()) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "the request's deadline passed");
  }
  if (context.IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "request cancelled");
  return std::nullopt;
}

// A request the engine ended early: by its deadline (DEADLINE_EXCEEDED) or a cancel.
grpc::Status CancelledStatus(const RequestEvent& e) {
  if (!e.error.ok() && !absl::IsCancelled(e.error)) return ToGrpcStatus(e.error);
  return grpc::Status(grpc::StatusCode::CANCELLED, "request cancelled");
}

std::chrono::steady_clock::time_point SteadyDeadline(const grpc::ServerContext& context) {
  const auto deadline = context.deadline();
  const auto now = std::chrono::system_clock::now();
  // gRPC's "no deadline" is far in the future; keep it as "none" instead of overflowing.
  if (deadline - now > std::chrono::hours(24 * 365)) return std::chrono::steady_clock::time_point::max();
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(deadline - now);
}

}  // namespace

GenerationServiceImpl::StreamSlot::StreamSlot(GenerationServiceImpl* service) : service_(service) {
  ok_ = service_->num_active_streams_.fetch_add(1) < service_->limits_.max_concurrent_streams;
}

GenerationServiceImpl::StreamSlot::~StreamSlot() { service_->num_active_streams_.fetch_sub(1); }

grpc::Status GenerationServiceImpl::TooManyStreams() {
  if (EngineMetrics* m = engine_->metrics(); m != nullptr) m->RequestRejected("too_many_streams");
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                      absl::StrCat("the coordinator already serves ", limits_.max_concurrent_streams,
                                   " Generate/GenerateStream calls (--max-concurrent-streams); retry later"));
}

GenerationServiceImpl::GenerationServiceImpl(Engine* engine, const Tokenizer* tokenizer,
                                             ServingLimits limits, ModelDescription model)
    : engine_(engine), tokenizer_(tokenizer), limits_(limits), model_(std::move(model)) {}

absl::StatusOr<uint64_t> GenerationServiceImpl::Start(const v1::GenerateRequest& request,
                                                      std::chrono::steady_clock::time_point deadline,
                                                      int max_undelivered_tokens, std::string* request_id,
                                                      std::vector<int32_t>* prompt,
                                                      std::shared_ptr<RequestStream>* stream) {
  auto valid = ValidateGenerateRequest(request, *tokenizer_, limits_);
  if (!valid.ok()) {
    if (EngineMetrics* m = engine_->metrics(); m != nullptr) m->RequestRejected("invalid_argument");
    return valid.status();
  }
  *request_id = valid->request_id.empty() ? absl::StrCat("req-", next_request_number_.fetch_add(1))
                                          : valid->request_id;
  *prompt = valid->prompt;
  *stream = std::make_shared<RequestStream>(max_undelivered_tokens);
  EngineRequest er;
  er.request_id = *request_id;
  er.prompt = std::move(valid->prompt);
  er.options = valid->options;
  er.sampling = valid->sampling;
  er.stop_strings = std::move(valid->stop_strings);
  er.stream = *stream;
  er.deadline = deadline;
  auto seq = engine_->Submit(std::move(er));
  if (!seq.ok()) {
    if (EngineMetrics* m = engine_->metrics(); m != nullptr) m->RequestRejected("unavailable");
  }
  return seq;
}

grpc::Status GenerationServiceImpl::Generate(grpc::ServerContext* context,
                                             const v1::GenerateRequest* request,
                                             v1::GenerateResponse* response) {
  std::string id;
  std::vector<int32_t> prompt;
  std::shared_ptr<RequestStream> stream;
  StreamSlot slot(this);
  if (!slot.ok()) return TooManyStreams();
  // The whole response is built in memory anyway (at most max_new_tokens), and this
  // handler never blocks while it collects, so its stream needs no bound.
  auto seq = Start(*request, SteadyDeadline(*context), std::numeric_limits<int>::max(), &id, &prompt, &stream);
  if (!seq.ok()) return ToGrpcStatus(seq.status());
  response->set_request_id(id);
  response->mutable_prompt_ids()->Add(prompt.begin(), prompt.end());
  while (true) {
    std::optional<RequestEvent> e = stream->Pop(kPollInterval);
    // Checked after every event as well: while tokens flow Pop never times out, and a
    // cancelled or expired call must stop within one step.
    if (!(e.has_value() && e->finished)) {
      if (std::optional<grpc::Status> ended = CallEnded(*context); ended.has_value()) {
        engine_->Cancel(*seq);
        return *ended;
      }
    }
    if (!e.has_value()) continue;
    response->mutable_token_ids()->Add(e->token_ids.begin(), e->token_ids.end());
    response->mutable_text()->append(e->text);
    AddLogprobs(*e, response->mutable_logprobs());
    if (!e->finished) continue;
    if (e->finish_reason == sched::FinishReason::kError) return ToGrpcStatus(e->error);
    if (e->finish_reason == sched::FinishReason::kCancelled) return CancelledStatus(*e);
    SetSummary(*e, response);
    response->set_replica(e->replica);
    return grpc::Status::OK;
  }
}

grpc::Status GenerationServiceImpl::GenerateStream(grpc::ServerContext* context,
                                                   const v1::GenerateRequest* request,
                                                   grpc::ServerWriter<v1::GenerateStreamResponse>* writer) {
  std::string id;
  std::vector<int32_t> prompt;
  std::shared_ptr<RequestStream> stream;
  StreamSlot slot(this);
  if (!slot.ok()) return TooManyStreams();
  auto seq = Start(*request, SteadyDeadline(*context), limits_.max_undelivered_tokens, &id, &prompt, &stream);
  if (!seq.ok()) return ToGrpcStatus(seq.status());
  // A client that stops reading blocks Write on HTTP/2 flow control; when its undelivered
  // tokens pass the stream's bound the engine ends the request and wakes us through this.
  stream->SetInterrupt([context] { context->TryCancel(); });
  absl::Cleanup clear_interrupt = [&stream] { stream->SetInterrupt(nullptr); };
  bool first = true;
  while (true) {
    std::optional<RequestEvent> e = stream->Pop(kPollInterval);
    if (!(e.has_value() && e->finished)) {
      if (std::optional<grpc::Status> ended = CallEnded(*context); ended.has_value()) {
        engine_->Cancel(*seq);
        return *ended;
      }
    }
    if (!e.has_value()) continue;
    if (e->finished && e->finish_reason == sched::FinishReason::kError) return ToGrpcStatus(e->error);
    if (e->finished && e->finish_reason == sched::FinishReason::kCancelled) return CancelledStatus(*e);
    v1::GenerateStreamResponse msg;
    msg.set_request_id(id);
    if (first) msg.mutable_prompt_ids()->Add(prompt.begin(), prompt.end());
    first = false;
    msg.mutable_token_ids()->Add(e->token_ids.begin(), e->token_ids.end());
    msg.set_text(e->text);
    AddLogprobs(*e, msg.mutable_logprobs());
    if (e->finished) SetSummary(*e, &msg);
    if (!writer->Write(msg)) {
      engine_->Cancel(*seq);
      return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
    }
    if (e->finished) return grpc::Status::OK;
  }
}

grpc::Status GenerationServiceImpl::Tokenize(grpc::ServerContext*, const v1::TokenizeRequest* request,
                                             v1::TokenizeResponse* response) {
  if (absl::Status s = CheckInputSize("text", request->text().size(), limits_); !s.ok()) {
    return ToGrpcStatus(s);
  }
  const std::vector<int32_t> ids = tokenizer_->Encode(request->text(), request->add_special_tokens());
  for (int32_t id : ids) {
    response->add_token_ids(id);
    // A byte-fallback piece alone is not valid UTF-8; protobuf strings must be.
    std::string piece = SanitizeUtf8(tokenizer_->Decode({id}, /*skip_special_tokens=*/false));
    if (const size_t complete = CompleteUtf8Length(piece); complete < piece.size()) {
      piece.replace(complete, std::string::npos, "\xEF\xBF\xBD");
    }
    response->add_pieces(std::move(piece));
    response->add_vocab_pieces(tokenizer_->PieceForId(id));
  }
  TokenOffsets offsets = ComputeTokenOffsets(*tokenizer_, ids);
  response->mutable_offsets()->Add(offsets.offsets.begin(), offsets.offsets.end());
  response->set_text(SanitizeUtf8(offsets.text));
  return grpc::Status::OK;
}

grpc::Status GenerationServiceImpl::GetModelInfo(grpc::ServerContext*, const v1::GetModelInfoRequest*,
                                                 v1::ModelInfo* info) {
  info->set_model(model_.name);
  info->set_dtype(model_.dtype);
  info->set_tp(model_.tp);
  info->set_replicas(model_.replicas);
  info->set_max_context(limits_.max_context);
  info->set_block_size(model_.block_size);
  info->set_vocab_size(limits_.vocab_size);
  uint64_t capacity = 0;
  uint32_t ready = 0;
  for (const ReplicaSnapshot& r : engine_->Snapshot()) {
    v1::ReplicaInfo* ri = info->add_replica_info();
    ri->set_replica(r.replica);
    ri->set_healthy(r.ready);
    ri->set_total_blocks(r.total_blocks);
    ri->set_free_blocks(r.free_blocks);
    ri->set_running(r.running);
    ri->set_waiting(r.waiting);
    if (r.ready) {
      capacity += static_cast<uint64_t>(r.total_blocks) * model_.block_size;
      ++ready;
    }
  }
  info->set_kv_capacity_tokens(capacity);
  info->set_ready_replicas(ready);
  return grpc::Status::OK;
}

}  // namespace tessera
