#ifndef TESSERA_WORKER_SERVICE_WORKER_SERVICE_H_
#define TESSERA_WORKER_SERVICE_WORKER_SERVICE_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/structured/token_vocabulary.h"
#include "common/rendezvous/kv_store_security.h"
#include "kernels/backend.h"
#include "tessera/v1/worker.grpc.pb.h"
#include "worker/communicator.h"
#include "worker/llama_model.h"
#include "worker/metrics/timed_communicator.h"
#include "worker/metrics/worker_metrics.h"
#include "worker/service/kv_transfer.h"
#include "worker/service/step_executor.h"

namespace tessera {

struct WorkerServiceOptions {
  std::string advertise_host = "127.0.0.1";  // Where peers reach this worker's collectives.
  WorkerMetrics* metrics = nullptr;  // Not owned; null: no metrics, no collective timing.
  // How ranks authenticate to the coordinator's rendezvous store (Gloo, shm, NCCL id).
  KvStoreSecurity store_security;
  // How this worker reaches other workers for KV transfers (null: plaintext), and the name
  // their certificates carry (empty: the host).
  std::shared_ptr<grpc::ChannelCredentials> peer_credentials;
  std::string peer_server_name;
};

// The Worker gRPC service: joins a group, loads its shard, sizes and allocates its KV
// cache, then executes steps. Errors become gRPC statuses only here, at the RPC edge.
class WorkerServiceImpl final : public v1::Worker::Service {
 public:
  WorkerServiceImpl(kernels::Backend* backend, WorkerServiceOptions options);

  grpc::Status Configure(grpc::ServerContext* context, const v1::ConfigureRequest* request,
                         v1::ConfigureResponse* response) override;
  grpc::Status LoadShard(grpc::ServerContext* context, const v1::LoadShardRequest* request,
                         grpc::ServerWriter<v1::LoadShardProgress>* writer) override;
  grpc::Status InitCache(grpc::ServerContext* context, const v1::InitCacheRequest* request,
                         v1::InitCacheResponse* response) override;
  grpc::Status ExecuteStep(grpc::ServerContext* context, const v1::StepRequest* request,
                           v1::StepResponse* response) override;
  // KV transfers between replicas (KvTransfer); neither waits for a step.
  grpc::Status PushKvBlocks(grpc::ServerContext* context, const v1::PushKvBlocksRequest* request,
                            v1::PushKvBlocksResponse* response) override;
  grpc::Status WriteKvBlocks(grpc::ServerContext* context, grpc::ServerReader<v1::KvBlocksChunk>* reader,
                             v1::WriteKvBlocksResponse* response) override;

  // Drops the group (communicator, model, KV cache) because its coordinator or a peer is
  // gone; the worker then registers again and is configured from scratch. Waits for a
  // step in progress, which a dead peer ends within the collective timeout.
  void Leave(const std::string& reason);
  // Whether this worker holds a formed group whose communicator has not failed.
  bool in_group() const { return in_group_.load(); }

 private:
  // Adds the forward passes since the last call to the metrics (graph replays and eager).
  void ExportForwardCounts() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Logits rows of the largest step: speculative verification computes them for every
  // token of each sequence's drafts. LoadShard's reserve and InitCache's warm-up agree.
  int MaxLogitRows(int max_seqs) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return max_seqs * (1 + num_speculative_tokens_);
  }

  kernels::Backend* const backend_;
  const WorkerServiceOptions options_;
  // One group at a time; steps run one at a time.
  absl::Mutex mu_;
  std::unique_ptr<Communicator> comm_ ABSL_GUARDED_BY(mu_);
  TimedCommunicator* timed_comm_ ABSL_GUARDED_BY(mu_) = nullptr;  // comm_ when metrics are on.
  std::unique_ptr<LlamaModel> model_ ABSL_GUARDED_BY(mu_);
  // Speculative decoding, as the last LoadShard asked: the draft model (method "draft")
  // and the settings each InitCache builds the proposer from.
  std::unique_ptr<LlamaModel> draft_model_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const structured::TokenVocabulary> vocabulary_ ABSL_GUARDED_BY(mu_);
  std::string speculative_method_ ABSL_GUARDED_BY(mu_);
  int prompt_lookup_min_ ABSL_GUARDED_BY(mu_) = 0;
  int prompt_lookup_max_ ABSL_GUARDED_BY(mu_) = 0;
  int num_speculative_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  // The model's forward-pass counts when last exported to the metrics.
  ForwardCounts last_forward_counts_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<StepExecutor> executor_ ABSL_GUARDED_BY(mu_);
  std::string group_ ABSL_GUARDED_BY(mu_);  // ConfigureRequest.rendezvous_prefix.
  // Reads and writes executor_'s cache beside the steps; detached before it goes.
  KvTransfer transfer_;
  std::atomic<bool> in_group_{false};
  // comm_ for Leave() to abort while a step holds mu_ (changed under both mutexes).
  absl::Mutex abort_mu_ ABSL_ACQUIRED_AFTER(mu_);
  Communicator* abortable_ ABSL_GUARDED_BY(abort_mu_) = nullptr;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_SERVICE_WORKER_SERVICE_H_
