#include "worker/comm/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tessera {
namespace {

// Polls without burning a core for long collectives: spin briefly (small all-reduces
// finish in microseconds), then back off to short sleeps.
class Poller {
 public:
  void Pause() {
    if (++polls_ < 2000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  int polls_ = 0;
};

std::string NcclError(ncclResult_t result, ncclComm_t comm) {
  std::string text = ncclGetErrorString(result);
  if (comm != nullptr) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && *last != '\0') absl::StrAppend(&text, " (", last, ")");
  }
  return text;
}

}  // namespace

struct NcclCommunicator::Impl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;
  float* barrier_scratch = nullptr;  // One device float the barrier all-reduces.
  int device = 0;
};

absl::StatusOr<std::string> GenerateNcclUniqueId() {
  ncclUniqueId id;
  if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
    return absl::UnavailableError(absl::StrCat("ncclGetUniqueId failed: ", ncclGetErrorString(r)));
  }
  return std::string(id.internal, sizeof(id.internal));
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    const NcclCommunicatorOptions& options) {
  const std::string where =
      absl::StrCat("NcclCommunicator init (rank ", options.rank, " of ", options.world_size,
                   ", device ", options.device, ", timeout ", options.timeout.count(), " ms)");
  if (options.unique_id.size() != NCCL_UNIQUE_ID_BYTES) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": unique id has ",
                                                   options.unique_id.size(), " bytes, want ",
                                                   NCCL_UNIQUE_ID_BYTES));
  }
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": rank out of range"));
  }
  if (cudaError_t e = cudaSetDevice(options.device); e != cudaSuccess) {
    return absl::UnavailableError(absl::StrCat(where, ": cudaSetDevice: ", cudaGetErrorString(e)));
  }
  auto impl = std::make_unique<Impl>();
  impl->device = options.device;
  impl->stream = static_cast<cudaStream_t>(options.stream);
  if (cudaError_t e = cudaEventCreateWithFlags(&impl->done, cudaEventDisableTiming);
      e != cudaSuccess) {
    return absl::UnavailableError(
        absl::StrCat(where, ": cudaEventCreate: ", cudaGetErrorString(e)));
  }
  if (cudaError_t e = cudaMalloc(&impl->barrier_scratch, sizeof(float)); e != cudaSuccess) {
    cudaEventDestroy(impl->done);
    return absl::UnavailableError(absl::StrCat(where, ": cudaMalloc: ", cudaGetErrorString(e)));
  }
  cudaMemset(impl->barrier_scratch, 0, sizeof(float));

  ncclUniqueId id;
  std::memcpy(id.internal, options.unique_id.data(), NCCL_UNIQUE_ID_BYTES);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // Lets a timeout abort an init or collective stuck on a dead peer.
  ncclResult_t r =
      ncclCommInitRankConfig(&impl->comm, options.world_size, id, options.rank, &config);
  const absl::Time deadline = absl::Now() + absl::FromChrono(options.timeout);
  Poller poller;
  while (r == ncclInProgress || r == ncclSuccess) {
    ncclResult_t state = ncclSuccess;
    r = ncclCommGetAsyncError(impl->comm, &state);
    if (r != ncclSuccess) break;
    if (state != ncclInProgress) {
      r = state;
      break;
    }
    if (absl::Now() > deadline) {
      ncclCommAbort(impl->comm);
      cudaFree(impl->barrier_scratch);
      cudaEventDestroy(impl->done);
      return absl::DeadlineExceededError(absl::StrCat(where, ": peers did not join in time"));
    }
    poller.Pause();
  }
  if (r != ncclSuccess) {
    const std::string why = NcclError(r, impl->comm);
    if (impl->comm != nullptr) ncclCommAbort(impl->comm);
    cudaFree(impl->barrier_scratch);
    cudaEventDestroy(impl->done);
    return absl::UnavailableError(absl::StrCat(where, ": ", why));
  }
  auto communicator = std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(std::move(impl), options.rank, options.world_size, options.timeout));
  communicator->queue_only_ = options.queue_without_waiting;
  return communicator;
}

NcclCommunicator::NcclCommunicator(std::unique_ptr<Impl> impl, int rank, int world_size,
                                   std::chrono::milliseconds timeout)
    : impl_(std::move(impl)), rank_(rank), world_size_(world_size), timeout_(timeout) {}

NcclCommunicator::~NcclCommunicator() {
  cudaSetDevice(impl_->device);
  if (impl_->comm != nullptr) {
    // A clean finalize waits for peers; bound it and abort rather than hang on exit.
    ncclResult_t r = ncclCommFinalize(impl_->comm);
    const absl::Time deadline = absl::Now() + absl::FromChrono(timeout_);
    Poller poller;
    ncclResult_t state = r;
    while (state == ncclInProgress && absl::Now() < deadline) {
      if (ncclCommGetAsyncError(impl_->comm, &state) != ncclSuccess) break;
      if (state == ncclInProgress) poller.Pause();
    }
    if (state == ncclSuccess) {
      ncclCommDestroy(impl_->comm);
    } else {
      ncclCommAbort(impl_->comm);
    }
  }
  cudaFree(impl_->barrier_scratch);
  cudaEventDestroy(impl_->done);
}

absl::Status NcclCommunicator::AbortedError(const char* op) const {
  return absl::AbortedError(absl::StrCat("NcclCommunicator ", op, " on rank ", rank_,
                                         ": communicator aborted earlier: ", abort_reason_));
}

absl::Status NcclCommunicator::Fail(const char* op, absl::StatusCode code, absl::string_view why) {
  abort_reason_ = absl::StrCat(op, " (timeout ", timeout_.count(), " ms) failed: ", why);
  aborted_.store(true, std::memory_order_release);
  if (impl_->comm != nullptr) {
    ncclCommAbort(impl_->comm);
    impl_->comm = nullptr;
  }
  return absl::Status(code, absl::StrCat("NcclCommunicator on rank ", rank_, " of ", world_size_,
                                         ": ", abort_reason_));
}

template <typename Fn>
absl::Status NcclCommunicator::Run(const char* op, size_t bytes, Fn&& enqueue, bool wait) {
  if (aborted()) return AbortedError(op);
  if (cudaError_t e = cudaSetDevice(impl_->device); e != cudaSuccess) {
    return Fail(op, absl::StatusCode::kUnavailable,
                absl::StrCat("cudaSetDevice: ", cudaGetErrorString(e)));
  }
  const absl::Time deadline = absl::Now() + absl::FromChrono(timeout_);
  Poller poller;
  ncclResult_t r = enqueue();
  // In non-blocking mode the enqueue itself may still be in progress.
  while (r == ncclInProgress) {
    ncclResult_t state = ncclSuccess;
    if (ncclResult_t q = ncclCommGetAsyncError(impl_->comm, &state); q != ncclSuccess) {
      r = q;
      break;
    }
    r = state;
    if (r == ncclInProgress) {
      if (absl::Now() > deadline) {
        return Fail(op, absl::StatusCode::kDeadlineExceeded,
                    absl::StrCat(bytes, " bytes: enqueue did not finish"));
      }
      poller.Pause();
    }
  }
  if (r != ncclSuccess) {
    return Fail(op, absl::StatusCode::kUnavailable, NcclError(r, impl_->comm));
  }
  if (!wait) {
    // Queued behind the compute kernels that produce its input; Wait() bounds it later.
    // No event here: the stream may be capturing a graph, and an event recorded into a
    // capture cannot be queried afterwards (cudaEventQuery fails with "invalid argument").
    pending_op_ = op;
    pending_bytes_ += bytes;
    return absl::OkStatus();
  }
  return RecordAndWait(op, bytes);
}

absl::Status NcclCommunicator::RecordAndWait(const char* op, size_t bytes) {
  if (cudaError_t e = cudaEventRecord(impl_->done, impl_->stream); e != cudaSuccess) {
    return Fail(op, absl::StatusCode::kUnavailable,
                absl::StrCat("cudaEventRecord: ", cudaGetErrorString(e)));
  }
  return WaitForEvent(op, bytes);
}

absl::Status NcclCommunicator::WaitForEvent(const char* op, size_t bytes) {
  const absl::Time deadline = absl::Now() + absl::FromChrono(timeout_);
  Poller poller;
  while (true) {
    const cudaError_t e = cudaEventQuery(impl_->done);
    if (e == cudaSuccess) return absl::OkStatus();
    if (e != cudaErrorNotReady) {
      return Fail(op, absl::StatusCode::kInternal,
                  absl::StrCat("CUDA error while waiting: ", cudaGetErrorString(e)));
    }
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(impl_->comm, &state);
    if (state != ncclSuccess && state != ncclInProgress) {
      return Fail(op, absl::StatusCode::kUnavailable, NcclError(state, impl_->comm));
    }
    if (absl::Now() > deadline) {
      return Fail(op, absl::StatusCode::kDeadlineExceeded,
                  absl::StrCat(bytes, " bytes: not complete (a peer is missing or stuck)"));
    }
    poller.Pause();
  }
}

absl::Status NcclCommunicator::Wait() {
  if (aborted()) return AbortedError("Wait");
  if (!queue_only_) return absl::OkStatus();  // Every call waited for itself.
  // Recorded now, after everything queued on the stream: on one stream its completion
  // means every earlier collective completed too, those queued by Run() and those inside a
  // replayed graph, which never pass through Run() (so this waits even with none pending).
  const char* op = pending_op_ != nullptr ? pending_op_ : "collectives of a replayed graph";
  const size_t bytes = pending_bytes_;
  pending_op_ = nullptr;
  pending_bytes_ = 0;
  return RecordAndWait(op, bytes);
}

absl::Status NcclCommunicator::AllReduceSum(float* data, size_t count) {
  if (aborted()) return AbortedError("AllReduceSum");
  if (count == 0) return absl::OkStatus();
  return Run(
      "AllReduceSum", count * sizeof(float),
      [&] {
        return ncclAllReduce(data, data, count, ncclFloat32, ncclSum, impl_->comm,
                             impl_->stream);
      },
      !queue_only_);
}

absl::Status NcclCommunicator::AllReduceSum(void* data, size_t count, DType dtype) {
  if (dtype == DType::kF32) return AllReduceSum(static_cast<float*>(data), count);
  if (dtype != DType::kBF16) {
    // A caller bug, not a broken group: nothing to abort.
    return absl::UnimplementedError(absl::StrCat("NcclCommunicator: all-reduce of ",
                                                 DTypeName(dtype), " (F32 or BF16 only)"));
  }
  if (aborted()) return AbortedError("AllReduceSum");
  if (count == 0) return absl::OkStatus();
  // BF16 activations (the CUDA backend's default): half the bytes on the wire; NCCL adds
  // in float32 and rounds each partial sum to BF16.
  return Run(
      "AllReduceSum", count * DTypeSize(dtype),
      [&] {
        return ncclAllReduce(data, data, count, ncclBfloat16, ncclSum, impl_->comm,
                             impl_->stream);
      },
      !queue_only_);
}

absl::Status NcclCommunicator::AllGather(const float* send, size_t count, float* recv) {
  if (aborted()) return AbortedError("AllGather");
  if (count == 0) return absl::OkStatus();
  return Run(
      "AllGather", count * sizeof(float),
      [&] { return ncclAllGather(send, recv, count, ncclFloat32, impl_->comm, impl_->stream); },
      !queue_only_);
}

absl::Status NcclCommunicator::Broadcast(void* data, size_t bytes, int root) {
  if (aborted()) return AbortedError("Broadcast");
  if (root < 0 || root >= world_size_) {
    return Fail("Broadcast", absl::StatusCode::kInvalidArgument,
                absl::StrCat("root ", root, " out of range for world size ", world_size_));
  }
  if (bytes == 0) return absl::OkStatus();
  return Run(
      "Broadcast", bytes,
      [&] { return ncclBroadcast(data, data, bytes, ncclUint8, root, impl_->comm, impl_->stream); },
      /*wait=*/true);
}

absl::Status NcclCommunicator::Barrier() {
  return Run(
      "Barrier", 0,
      [&] {
        return ncclAllReduce(impl_->barrier_scratch, impl_->barrier_scratch, 1, ncclFloat32,
                             ncclSum, impl_->comm, impl_->stream);
      },
      /*wait=*/true);
}

}  // namespace tessera
