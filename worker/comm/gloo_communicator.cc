#include "worker/comm/gloo_communicator.h"

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/rendezvous/kv_store_client.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"
#include "worker/comm/gloo_kv_store.h"

namespace tessera {
namespace {

// Gloo reports a timeout only through the exception text.
absl::StatusCode CodeForGlooError(const std::string& what) {
  return absl::StrContains(what, "Timed out") || absl::StrContains(what, "timed out") ||
                 absl::StrContains(what, "Timeout")
             ? absl::StatusCode::kDeadlineExceeded
             : absl::StatusCode::kUnavailable;
}

// This Gloo snapshot writes to its sockets with writev(), which raises SIGPIPE when a
// peer has closed the connection (exactly what an aborting peer does). The default
// action would kill the process instead of letting the write fail with EPIPE, so ignore
// SIGPIPE unless the program installed its own handler.
void IgnoreSigpipeIfDefault() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    ::sigaction(SIGPIPE, &ignore, nullptr);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Create(
    const GlooCommunicatorOptions& options) {
  const std::string where =
      absl::StrCat("GlooCommunicator rendezvous (prefix '", options.prefix, "', rank ",
                   options.rank, " of ", options.world_size, ", store ", options.store_host, ":",
                   options.store_port, ", timeout ", options.timeout.count(), " ms)");
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": rank out of range"));
  }
  if (options.prefix.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": an empty prefix would collide with other groups' keys"));
  }
  if (options.timeout.count() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": timeout must be positive"));
  }
  absl::StatusOr<std::unique_ptr<KvStoreClient>> client = KvStoreClient::Connect(
      options.store_host, options.store_port, absl::FromChrono(options.timeout), options.store_security);
  if (!client.ok()) {
    return absl::Status(client.status().code(),
                        absl::StrCat(where, ": ", client.status().message()));
  }
  IgnoreSigpipeIfDefault();
  try {
    GlooKvStore store(**client, options.timeout);
    gloo::rendezvous::PrefixStore prefix_store(options.prefix, store);
    gloo::transport::tcp::attr attr;
    attr.hostname = options.bind_host;
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.world_size);
    context->setTimeout(options.timeout);
    context->connectFullMesh(prefix_store, device);
    // The store is only needed to exchange addresses; the client closes on return.
    return std::unique_ptr<GlooCommunicator>(new GlooCommunicator(std::move(context), options));
  } catch (const std::exception& e) {
    return absl::Status(CodeForGlooError(e.what()), absl::StrCat(where, ": ", e.what()));
  }
}

GlooCommunicator::GlooCommunicator(std::shared_ptr<gloo::Context> context,
                                   const GlooCommunicatorOptions& options)
    : context_(std::move(context)),
      rank_(options.rank),
      world_size_(options.world_size),
      timeout_(options.timeout),
      gather_allreduce_max_bytes_(options.gather_allreduce_max_bytes) {}

GlooCommunicator::~GlooCommunicator() = default;

template <typename Fn>
absl::Status GlooCommunicator::Guarded(const char* op, size_t bytes, Fn&& body) {
  if (aborted()) {
    return absl::AbortedError(absl::StrCat("GlooCommunicator ", op, " on rank ", rank_,
                                           ": communicator aborted earlier: ", abort_reason_));
  }
  std::string what;
  try {
    body();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    what = e.what();
  }
  const absl::StatusCode code = CodeForGlooError(what);
  abort_reason_ =
      absl::StrCat(op, " (", bytes, " bytes, timeout ", timeout_.count(), " ms) failed: ", what);
  aborted_.store(true, std::memory_order_release);
  try {
    // Peers blocked on this rank now see a closed connection instead of a long timeout.
    context_->closeConnections();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "GlooCommunicator rank %d: closing connections after %s: %s\n", rank_, op,
                 e.what());
  }
  return absl::Status(code, absl::StrCat("GlooCommunicator on rank ", rank_, " of ", world_size_,
                                         ": ", abort_reason_));
}

absl::Status GlooCommunicator::AllReduceSum(float* data, size_t count) {
  return Guarded("AllReduceSum", count * sizeof(float), [&] {
    if (count == 0 || world_size_ == 1) return;
    const size_t ranks = static_cast<size_t>(world_size_);
    if (count * sizeof(float) <= gather_allreduce_max_bytes_) {
      gathered_.resize(count * ranks);
      gloo::AllgatherOptions opts(context_);
      opts.setInput(data, count);
      opts.setOutput(gathered_.data(), count * ranks);
      opts.setTimeout(timeout_);
      gloo::allgather(opts);
      // Rank order on every rank, so every rank gets the same bits.
      std::memcpy(data, gathered_.data(), count * sizeof(float));
      for (size_t r = 1; r < ranks; ++r) {
        const float* part = gathered_.data() + r * count;
        for (size_t i = 0; i < count; ++i) data[i] += part[i];
      }
      return;
    }
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(data, count);
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    opts.setTimeout(timeout_);
    gloo::allreduce(opts);
  });
}

absl::Status GlooCommunicator::AllGather(const float* send, size_t count, float* recv) {
  return Guarded("AllGather", count * sizeof(float), [&] {
    if (count == 0) return;
    if (world_size_ == 1) {
      if (send != recv) std::memmove(recv, send, count * sizeof(float));
      return;
    }
    gloo::AllgatherOptions opts(context_);
    // Gloo only reads the input; the const_cast satisfies its non-const buffer type.
    opts.setInput(const_cast<float*>(send), count);
    opts.setOutput(recv, count * static_cast<size_t>(world_size_));
    opts.setTimeout(timeout_);
    gloo::allgather(opts);
  });
}

absl::Status GlooCommunicator::Broadcast(void* data, size_t bytes, int root) {
  if (root < 0 || root >= world_size_) {
    // Abort so that this rank cannot later pair up with a peer's mismatched collective.
    return Guarded("Broadcast", bytes, [&] {
      throw gloo::InvalidOperationException(
          absl::StrCat("root ", root, " out of range for world size ", world_size_));
    });
  }
  return Guarded("Broadcast", bytes, [&] {
    if (bytes == 0 || world_size_ == 1) return;
    gloo::BroadcastOptions opts(context_);
    opts.setOutput(static_cast<uint8_t*>(data), bytes);
    opts.setRoot(root);
    opts.setTimeout(timeout_);
    gloo::broadcast(opts);
  });
}

absl::Status GlooCommunicator::Barrier() {
  return Guarded("Barrier", 0, [&] {
    if (world_size_ == 1) return;
    gloo::BarrierOptions opts(context_);
    opts.setTimeout(timeout_);
    gloo::barrier(opts);
  });
}

}  // namespace tessera
