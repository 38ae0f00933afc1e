#include "coordinator/api/response_building.h"

#include "common/grpc_status.h"

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

template <typename Response>
void SetSummaryImpl(const RequestEvent& e, Response* r) {
  r->set_finish_reason(ToProto(e.finish_reason));
  r->mutable_usage()->set_prompt_tokens(e.prompt_tokens);
  r->mutable_usage()->set_completion_tokens(e.completion_tokens);
  r->mutable_usage()->set_cached_prompt_tokens(e.cached_prompt_tokens);
  r->mutable_timings()->set_queue_seconds(e.queue_seconds);
  r->mutable_timings()->set_time_to_first_token_seconds(e.ttft_seconds);
  r->mutable_timings()->set_total_seconds(e.total_seconds);
}

}  // namespace

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

void SetSummary(const RequestEvent& e, v1::GenerateResponse* r) { SetSummaryImpl(e, r); }
void SetSummary(const RequestEvent& e, v1::GenerateStreamResponse* r) { SetSummaryImpl(e, r); }

grpc::Status FailureStatus(const RequestEvent& e) {
  if (e.finish_reason == sched::FinishReason::kError) return ToGrpcStatus(e.error);
  // A request the engine ended early by a cancel (or its deadline, which carries its error).
  if (!e.error.ok() && !absl::IsCancelled(e.error)) return ToGrpcStatus(e.error);
  return grpc::Status(grpc::StatusCode::CANCELLED, "request cancelled");
}

std::chrono::steady_clock::time_point SteadyDeadline(const grpc::ServerContextBase& context) {
  const auto deadline = context.deadline();
  const auto now = std::chrono::system_clock::now();
  // gRPC's "no deadline" is far in the future; keep it as "none" instead of overflowing.
  if (deadline - now > std::chrono::hours(24 * 365)) return std::chrono::steady_clock::time_point::max();
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(deadline - now);
}

grpc::Status ClientEndedStatus(const grpc::ServerContextBase& context) {
  if (context.deadline() <= std::chrono::system_clock::now()) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "the request's deadline passed");
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "request cancelled");
}

}  // namespace tessera
