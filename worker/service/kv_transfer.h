#ifndef TESSERA_WORKER_SERVICE_KV_TRANSFER_H_
#define TESSERA_WORKER_SERVICE_KV_TRANSFER_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "kernels/backend.h"
#include "tessera/v1/worker.grpc.pb.h"
#include "worker/kv_block_codec.h"
#include "worker/kv_cache.h"

namespace tessera {

// KV transfers between replicas (disaggregated prefill and decode), rank to rank over the
// workers' gRPC data plane: the prefill rank reads the blocks and streams them to the same
// rank of the decode replica, which writes them into its cache as they arrive.
//
// Both ends run beside the rank's steps, not between them: a transfer only touches blocks
// the coordinator holds for it (the prefill side's are held until it ends, the decode
// side's run no step until it has landed), and distinct blocks are distinct memory. The
// cache itself lives as long as the group: Attach when it is allocated, Detach (which
// waits for transfers using it) before it is freed.
class KvTransfer {
 public:
  // `peer_credentials` (null: plaintext) and `peer_server_name` (empty: the host) reach the
  // other workers, as the coordinator reaches them.
  KvTransfer(kernels::Backend* backend, std::shared_ptr<grpc::ChannelCredentials> peer_credentials,
             std::string peer_server_name);

  void Attach(KvCache* cache, std::string group);
  void Detach();

  // The prefill side: reads `request`'s blocks and sends them.
  absl::StatusOr<v1::PushKvBlocksResponse> Push(const v1::PushKvBlocksRequest& request);
  // The decode side: writes every chunk of the stream; returns the blocks written.
  absl::StatusOr<int> Receive(grpc::ServerReaderInterface<v1::KvBlocksChunk>* reader);

 private:
  v1::Worker::Stub* PeerStub(const std::string& address);

  kernels::Backend* const backend_;
  const std::shared_ptr<grpc::ChannelCredentials> peer_credentials_;
  const std::string peer_server_name_;
  // Readers: transfers. Writer: Attach and Detach.
  absl::Mutex cache_mu_;
  KvCache* cache_ ABSL_GUARDED_BY(cache_mu_) = nullptr;
  std::unique_ptr<KvBlockCodec> codec_ ABSL_GUARDED_BY(cache_mu_);
  std::string group_ ABSL_GUARDED_BY(cache_mu_);
  absl::Mutex peers_mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<v1::Worker::Stub>> peers_ ABSL_GUARDED_BY(peers_mu_);
};

}  // namespace tessera

#endif  // TESSERA_WORKER_SERVICE_KV_TRANSFER_H_
