#ifndef TESSERA_COORDINATOR_API_GENERATE_UNARY_REACTOR_H_
#define TESSERA_COORDINATOR_API_GENERATE_UNARY_REACTOR_H_

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/api/generate_admission.h"
#include "coordinator/engine/request_stream.h"
#include "grpcpp/grpcpp.h"
#include "tessera/v1/generation.pb.h"

namespace tessera {

// One unary Generate call on gRPC's callback API. The engine's events are appended to the
// response as they come (on the engine thread, by the RequestStream listener; the response
// is bounded by max_new_tokens, so the stream needs no bound). A cancel or an expired
// deadline (OnCancel) cancels the engine request at once, so it stops within one step.
// Deletes itself in OnDone.
class GenerateUnaryReactor final : public grpc::ServerUnaryReactor {
 public:
  GenerateUnaryReactor(grpc::CallbackServerContext* context, const v1::GenerateRequest& request,
                       v1::GenerateResponse* response, Admission* admission);

  void OnCancel() override;
  void OnDone() override;

 private:
  void Collect() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  grpc::CallbackServerContext* const context_;
  v1::GenerateResponse* const response_;
  Admission* const admission_;
  const std::shared_ptr<RequestStream> stream_;
  bool holds_slot_ = false;

  absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t seq_id_ ABSL_GUARDED_BY(mu_) = 0;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_API_GENERATE_UNARY_REACTOR_H_
