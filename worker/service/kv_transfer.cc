#include "worker/service/kv_transfer.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_channel.h"
#include "common/grpc_status.h"
#include "worker/backend_factory.h"

namespace tessera {
namespace {

// Blocks go out in messages of about this size: big enough to keep the stream busy, far
// below the 256 MiB message limit of the cluster's channels.
constexpr size_t kChunkBytes = size_t{8} << 20;

// Fault injection for the failure tests: TESSERA_KV_PUSH_DELAY_MS holds every push that
// long after reading its blocks, so a test can kill a worker in the middle of a transfer.
std::chrono::milliseconds PushDelay() {
  static const std::chrono::milliseconds delay = [] {
    const char* v = std::getenv("TESSERA_KV_PUSH_DELAY_MS");
    return std::chrono::milliseconds(v != nullptr ? std::atoi(v) : 0);
  }();
  return delay;
}

}  // namespace

KvTransfer::KvTransfer(kernels::Backend* backend, std::shared_ptr<grpc::ChannelCredentials> peer_credentials,
                       std::string peer_server_name)
    : backend_(backend), peer_credentials_(std::move(peer_credentials)), peer_server_name_(std::move(peer_server_name)) {}

void KvTransfer::Attach(KvCache* cache, std::string group) {
  absl::WriterMutexLock lock(&cache_mu_);
  cache_ = cache;
  codec_ = std::make_unique<KvBlockCodec>(backend_, cache->shape(), cache->num_layers());
  group_ = std::move(group);
}

void KvTransfer::Detach() {
  absl::WriterMutexLock lock(&cache_mu_);
  cache_ = nullptr;
  codec_.reset();
  group_.clear();
}

v1::Worker::Stub* KvTransfer::PeerStub(const std::string& address) {
  absl::MutexLock lock(&peers_mu_);
  std::unique_ptr<v1::Worker::Stub>& stub = peers_[address];
  if (stub == nullptr) stub = v1::Worker::NewStub(ClusterChannel(address, peer_credentials_, peer_server_name_));
  return stub.get();
}

absl::StatusOr<v1::PushKvBlocksResponse> KvTransfer::Push(const v1::PushKvBlocksRequest& request) {
  const auto start = std::chrono::steady_clock::now();
  const int n = request.src_block_ids_size();
  if (n != request.dst_block_ids_size()) {
    return absl::InvalidArgumentError(absl::StrCat("KV push of ", n, " blocks into ", request.dst_block_ids_size()));
  }
  // Read under the lock, send without it: a slow or dead peer must not hold up Detach.
  std::vector<uint8_t> data;
  size_t bytes_per_block = 0;
  {
    absl::ReaderMutexLock lock(&cache_mu_);
    if (cache_ == nullptr) return absl::FailedPreconditionError("this worker holds no KV cache (no formed group)");
    if (absl::Status s = BindBackendToThread(*backend_); !s.ok()) return s;
    bytes_per_block = codec_->bytes_per_block();
    data.resize(bytes_per_block * n);
    for (int i = 0; i < n; ++i) {
      const int block = static_cast<int>(request.src_block_ids(i));
      if (absl::Status s = KvBlockCodec::CheckBlock(*cache_, block); !s.ok()) return s;
      codec_->Read(*cache_, block, data.data() + bytes_per_block * i);
    }
  }
  if (PushDelay().count() > 0) std::this_thread::sleep_for(PushDelay());
  grpc::ClientContext context;
  // Generous: a transfer is bounded by the link, and a dead peer must still end it.
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30) +
                       std::chrono::milliseconds(data.size() / (50 << 10)));  // 50 MB/s at least.
  v1::WriteKvBlocksResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::KvBlocksChunk>> writer =
      PeerStub(request.dst_address())->WriteKvBlocks(&context, &response);
  const int per_chunk = std::max<int>(1, static_cast<int>(kChunkBytes / std::max<size_t>(bytes_per_block, 1)));
  bool sent = true;
  for (int first = 0; first < n && sent; first += per_chunk) {
    const int count = std::min(per_chunk, n - first);
    v1::KvBlocksChunk chunk;
    if (first == 0) {
      chunk.set_group(request.dst_group());
      chunk.set_bytes_per_block(bytes_per_block);
    }
    for (int i = first; i < first + count; ++i) chunk.add_block_ids(request.dst_block_ids(i));
    chunk.set_data(data.data() + bytes_per_block * first, bytes_per_block * count);
    sent = writer->Write(chunk);
  }
  if (sent) writer->WritesDone();
  const grpc::Status status = writer->Finish();
  if (!status.ok()) {
    const absl::Status s = FromGrpcStatus(status);
    return absl::Status(s.code(), absl::StrCat("KV transfer to ", request.dst_address(), ": ", s.message()));
  }
  if (static_cast<int>(response.num_blocks()) != n) {
    return absl::DataLossError(
        absl::StrCat("KV transfer to ", request.dst_address(), ": ", response.num_blocks(), " of ", n, " blocks landed"));
  }
  v1::PushKvBlocksResponse out;
  out.set_bytes(data.size());
  out.set_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return out;
}

absl::StatusOr<int> KvTransfer::Receive(grpc::ServerReaderInterface<v1::KvBlocksChunk>* reader) {
  v1::KvBlocksChunk chunk;
  int num_blocks = 0;
  bool first = true;
  std::string group;
  while (reader->Read(&chunk)) {
    absl::ReaderMutexLock lock(&cache_mu_);
    if (cache_ == nullptr) return absl::FailedPreconditionError("this worker holds no KV cache (no formed group)");
    if (first) group = chunk.group();
    // Checked on every chunk: the worker may have joined another group mid-stream.
    if (group != group_) {
      return absl::FailedPreconditionError(
          absl::StrCat("KV blocks for group '", group, "'; this worker is in group '", group_, "'"));
    }
    const size_t bytes_per_block = codec_->bytes_per_block();
    if (first) {
      if (chunk.bytes_per_block() != bytes_per_block) {
        return absl::InvalidArgumentError(absl::StrCat(
            "KV layout mismatch: the sender's blocks are ", chunk.bytes_per_block(), " bytes, this rank's ",
            bytes_per_block, " (the replicas must have the same model, tp size and KV cache dtype)"));
      }
      if (absl::Status s = BindBackendToThread(*backend_); !s.ok()) return s;
      first = false;
    }
    if (chunk.data().size() != bytes_per_block * chunk.block_ids_size()) {
      return absl::InvalidArgumentError(absl::StrCat("KV chunk of ", chunk.block_ids_size(), " blocks carries ",
                                                     chunk.data().size(), " bytes"));
    }
    const auto* in = reinterpret_cast<const uint8_t*>(chunk.data().data());
    for (int i = 0; i < chunk.block_ids_size(); ++i) {
      const int block = static_cast<int>(chunk.block_ids(i));
      if (absl::Status s = KvBlockCodec::CheckBlock(*cache_, block); !s.ok()) return s;
      codec_->Write(in + bytes_per_block * i, *cache_, block);
    }
    num_blocks += chunk.block_ids_size();
  }
  return num_blocks;
}

}  // namespace tessera
