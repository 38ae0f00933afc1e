#include "coordinator/api/generate_admission.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/metrics/engine_metrics.h"

namespace tessera {

bool Admission::AcquireStream() {
  if (num_active_streams_.fetch_add(1) < limits_.max_concurrent_streams) return true;
  num_active_streams_.fetch_sub(1);
  return false;
}

grpc::Status Admission::TooManyStreams() const {
  if (EngineMetrics* m = engine_->metrics(); m != nullptr) m->RequestRejected("too_many_streams", protocol_);
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                      absl::StrCat("the coordinator already serves ", limits_.max_concurrent_streams,
                                   " ", protocol_, " generation calls (--max-concurrent-streams); retry later"));
}

absl::StatusOr<uint64_t> Admission::Start(const v1::GenerateRequest& request,
                                          std::chrono::steady_clock::time_point deadline,
                                          std::shared_ptr<RequestStream> stream, std::string* request_id,
                                          std::vector<int32_t>* prompt) {
  // Text is held against --max-inflight-input-bytes while it is tokenized; what is over
  // --max-input-bytes is left to validation, which names that limit instead.
  InputBudget::Lease lease;
  if (limits_.input_budget != nullptr) {
    int64_t bytes = 0;
    if (request.has_text()) bytes = static_cast<int64_t>(request.text().size());
    for (const v1::ChatMessage& m : request.messages().messages()) {
      bytes += static_cast<int64_t>(m.role().size() + m.content().size());
    }
    if (bytes > 0 && bytes <= limits_.max_input_bytes) {
      auto acquired = limits_.input_budget->Acquire(bytes, "the input");
      if (!acquired.ok()) {
        if (EngineMetrics* m = engine_->metrics(); m != nullptr) m->RequestRejected("input_budget", protocol_);
        return acquired.status();
      }
      lease = *std::move(acquired);
    }
  }
  auto valid = ValidateGenerateRequest(request, *tokenizer_, limits_, chat_template_);
  lease.Release();
  if (!valid.ok()) {
    if (EngineMetrics* m = engine_->metrics(); m != nullptr) {
      m->RequestRejected(valid.status().code() == absl::StatusCode::kFailedPrecondition
                             ? "failed_precondition"
                             : "invalid_argument",
                         protocol_);
    }
    return valid.status();
  }
  *request_id = valid->request_id.empty() ? absl::StrCat("req-", next_request_number_.fetch_add(1))
                                          : valid->request_id;
  *prompt = valid->prompt;
  EngineRequest er;
  er.request_id = *request_id;
  er.prompt = std::move(valid->prompt);
  er.options = valid->options;
  er.sampling = valid->sampling;
  er.stop_strings = std::move(valid->stop_strings);
  er.grammar_gbnf = std::move(valid->grammar_gbnf);
  er.stream = std::move(stream);
  er.protocol = protocol_;
  er.deadline = deadline;
  auto seq = engine_->Submit(std::move(er));
  if (!seq.ok()) {
    if (EngineMetrics* m = engine_->metrics(); m != nullptr) m->RequestRejected("unavailable", protocol_);
  }
  return seq;
}

}  // namespace tessera
