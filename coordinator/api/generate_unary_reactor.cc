#include "coordinator/api/generate_unary_reactor.h"

#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/grpc_status.h"
#include "coordinator/api/response_building.h"

namespace tessera {

GenerateUnaryReactor::GenerateUnaryReactor(grpc::CallbackServerContext* context,
                                           const v1::GenerateRequest& request, v1::GenerateResponse* response,
                                           Admission* admission)
    : context_(context),
      response_(response),
      admission_(admission),
      stream_(std::make_shared<RequestStream>(std::numeric_limits<int>::max())) {
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
    Collect();
  });
  absl::MutexLock lock(&mu_);
  std::string id;
  std::vector<int32_t> prompt;
  auto seq = admission_->Start(request, SteadyDeadline(*context_), stream_, &id, &prompt);
  if (!seq.ok()) {
    FinishLocked(ToGrpcStatus(seq.status()));
    return;
  }
  started_ = true;
  seq_id_ = *seq;
  response_->set_request_id(id);
  response_->mutable_prompt_ids()->Add(prompt.begin(), prompt.end());
  Collect();
}

void GenerateUnaryReactor::Collect() {
  if (finished_) return;
  std::optional<RequestEvent> e = stream_->TryPop();
  if (!e.has_value()) return;
  response_->mutable_token_ids()->Add(e->token_ids.begin(), e->token_ids.end());
  response_->mutable_text()->append(e->text);
  AddLogprobs(*e, response_->mutable_logprobs());
  if (!e->finished) return;
  if (e->finish_reason == sched::FinishReason::kError || e->finish_reason == sched::FinishReason::kCancelled) {
    FinishLocked(FailureStatus(*e));
    return;
  }
  SetSummary(*e, response_);
  response_->set_replica(e->replica);
  FinishLocked(grpc::Status::OK);
}

void GenerateUnaryReactor::FinishLocked(grpc::Status status) {
  if (finished_) return;
  finished_ = true;
  Finish(std::move(status));
}

void GenerateUnaryReactor::OnCancel() {
  absl::MutexLock lock(&mu_);
  if (started_) admission_->engine()->Cancel(seq_id_);
  FinishLocked(ClientEndedStatus(*context_));
}

void GenerateUnaryReactor::OnDone() {
  stream_->SetListener(nullptr);
  if (holds_slot_) admission_->ReleaseStream();
  delete this;
}

}  // namespace tessera
