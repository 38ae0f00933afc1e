#include "coordinator/api/generate_stream_reactor.h"

#include <optional>
#include <utility>

#include "common/grpc_status.h"
#include "coordinator/api/response_building.h"

namespace tessera {

GenerateStreamReactor::GenerateStreamReactor(grpc::CallbackServerContext* context,
                                             const v1::GenerateRequest& request, Admission* admission)
    : context_(context),
      admission_(admission),
      stream_(std::make_shared<RequestStream>(admission->limits().max_undelivered_tokens)) {
  holds_slot_ = admission_->AcquireStream();
  if (!holds_slot_) {
    absl::MutexLock lock(&mu_);
    FinishLocked(admission_->TooManyStreams());
    return;
  }
  // Before Submit, so no event comes before someone listens, and outside mu_: the engine
  // calls the listener holding the stream's listener lock, and the listener takes mu_. An
  // event that comes during the rest of this constructor waits for mu_.
  stream_->SetListener([this] {
    absl::MutexLock lock(&mu_);
    Pump();
  });
  stream_->SetInterrupt([context] { context->TryCancel(); });
  absl::MutexLock lock(&mu_);
  auto seq = admission_->Start(request, SteadyDeadline(*context_), stream_, &request_id_, &prompt_);
  if (!seq.ok()) {
    FinishLocked(ToGrpcStatus(seq.status()));
    return;
  }
  started_ = true;
  seq_id_ = *seq;
  Pump();
}

void GenerateStreamReactor::Pump() {
  if (writing_ || finished_) return;
  std::optional<RequestEvent> e = stream_->TryPop();
  if (!e.has_value()) return;
  if (e->finished && (e->finish_reason == sched::FinishReason::kError ||
                      e->finish_reason == sched::FinishReason::kCancelled)) {
    FinishLocked(FailureStatus(*e));
    return;
  }
  message_.Clear();
  message_.set_request_id(request_id_);
  if (first_) message_.mutable_prompt_ids()->Add(prompt_.begin(), prompt_.end());
  first_ = false;
  message_.mutable_token_ids()->Add(e->token_ids.begin(), e->token_ids.end());
  message_.set_text(std::move(e->text));
  AddLogprobs(*e, message_.mutable_logprobs());
  writing_ = true;
  if (e->finished) {
    SetSummary(*e, &message_);
    finished_ = true;
    StartWriteAndFinish(&message_, grpc::WriteOptions(), grpc::Status::OK);
    return;
  }
  StartWrite(&message_);
}

void GenerateStreamReactor::FinishLocked(grpc::Status status) {
  if (finished_) return;
  finished_ = true;
  Finish(std::move(status));
}

void GenerateStreamReactor::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  writing_ = false;
  if (finished_) return;
  if (ok) {
    Pump();
    return;
  }
  // The write failed: the client went away, or the engine gave up on a client that does
  // not read (its failure is queued and says why).
  std::optional<RequestEvent> e = stream_->TryPop();
  if (e.has_value() && e->finished && e->finish_reason != sched::FinishReason::kLength &&
      e->finish_reason != sched::FinishReason::kStop && e->finish_reason != sched::FinishReason::kEos) {
    FinishLocked(FailureStatus(*e));
    return;
  }
  admission_->engine()->Cancel(seq_id_);
  FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
}

void GenerateStreamReactor::OnCancel() {
  absl::MutexLock lock(&mu_);
  if (started_) admission_->engine()->Cancel(seq_id_);
  // A write in flight fails and OnWriteDone ends the call; otherwise end it here.
  if (!writing_) FinishLocked(ClientEndedStatus(*context_));
}

void GenerateStreamReactor::OnDone() {
  // Waits for a listener call in progress; none can start after this.
  stream_->SetListener(nullptr);
  stream_->SetInterrupt(nullptr);
  if (holds_slot_) admission_->ReleaseStream();
  delete this;
}

}  // namespace tessera
