#ifndef TESSERA_COORDINATOR_API_GENERATE_STREAM_REACTOR_H_
#define TESSERA_COORDINATOR_API_GENERATE_STREAM_REACTOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/api/generate_admission.h"
#include "coordinator/engine/request_stream.h"
#include "grpcpp/grpcpp.h"
#include "tessera/v1/generation.pb.h"

namespace tessera {

// One GenerateStream call on gRPC's callback API: no thread waits for it. The engine's
// Push wakes it (RequestStream listener); it starts a write when none is in flight, and
// OnWriteDone starts the next with everything that queued meanwhile as one message. A
// client that stops reading leaves its tokens in the RequestStream, whose bound makes the
// engine end the request (RESOURCE_EXHAUSTED) and cancel the call (TryCancel), so a
// write blocked on flow control cannot pin anything. Deletes itself in OnDone.
class GenerateStreamReactor final : public grpc::ServerWriteReactor<v1::GenerateStreamResponse> {
 public:
  GenerateStreamReactor(grpc::CallbackServerContext* context, const v1::GenerateRequest& request,
                        Admission* admission);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  // Starts the next write, or finishes, from what the stream holds; called on every event
  // and after every write.
  void Pump() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  grpc::CallbackServerContext* const context_;
  Admission* const admission_;
  const std::shared_ptr<RequestStream> stream_;
  bool holds_slot_ = false;

  absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;  // Submitted: seq_id_ is valid.
  uint64_t seq_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::string request_id_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> prompt_ ABSL_GUARDED_BY(mu_);
  bool first_ ABSL_GUARDED_BY(mu_) = true;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // Finish called (or a last write started).
  v1::GenerateStreamResponse message_ ABSL_GUARDED_BY(mu_);  // Alive until OnWriteDone.
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_API_GENERATE_STREAM_REACTOR_H_
