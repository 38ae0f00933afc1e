#include "worker/comm/local_communicator.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"

namespace tessera {
namespace {

const char* OpName(int op) {
  switch (op) {
    case 1:
      return "AllReduceSum";
    case 2:
      return "AllGather";
    case 3:
      return "Broadcast";
    case 4:
      return "Barrier";
    default:
      return "none";
  }
}

}  // namespace

std::shared_ptr<LocalGroup> LocalGroup::Create(int world_size, std::chrono::milliseconds timeout) {
  if (world_size < 1) {
    std::fprintf(stderr, "LocalGroup: world_size %d must be at least 1\n", world_size);
    std::abort();
  }
  return std::shared_ptr<LocalGroup>(new LocalGroup(world_size, timeout));
}

LocalGroup::LocalGroup(int world_size, std::chrono::milliseconds timeout)
    : world_size_(world_size), timeout_(timeout), arrivals_(world_size) {}

void LocalGroup::AbortLocked(absl::Status reason) {
  if (aborted_.load(std::memory_order_relaxed)) return;
  abort_reason_ = std::move(reason);
  aborted_.store(true, std::memory_order_release);
  cv_.SignalAll();
}

absl::Status LocalGroup::Run(int rank, const Arrival& arrival) {
  const char* op_name = OpName(static_cast<int>(arrival.op));
  absl::MutexLock lock(&mu_);
  if (aborted_.load(std::memory_order_relaxed)) {
    return absl::AbortedError(absl::StrCat("LocalCommunicator ", op_name, " on rank ", rank,
                                           ": group aborted earlier: ", abort_reason_.message()));
  }
  arrivals_[rank] = arrival;
  if (++arrived_ == world_size_) {
    absl::Status status = CompleteLocked();
    if (!status.ok()) {
      AbortLocked(status);
      return status;
    }
    arrived_ = 0;
    ++generation_;
    for (Arrival& a : arrivals_) a = Arrival{};
    cv_.SignalAll();
    return absl::OkStatus();
  }
  const uint64_t my_generation = generation_;
  const absl::Time deadline = absl::Now() + absl::FromChrono(timeout_);
  while (generation_ == my_generation && !aborted_.load(std::memory_order_relaxed)) {
    if (cv_.WaitWithDeadline(&mu_, deadline) && generation_ == my_generation &&
        !aborted_.load(std::memory_order_relaxed)) {
      std::vector<int> missing;
      for (int r = 0; r < world_size_; ++r) {
        if (arrivals_[r].op == Op::kNone) missing.push_back(r);
      }
      AbortLocked(absl::DeadlineExceededError(
          absl::StrCat("LocalCommunicator ", op_name, ": rank ", rank, " waited ", timeout_.count(),
                       " ms for rank(s) ", absl::StrJoin(missing, ","), " of ", world_size_,
                       " which never arrived")));
    }
  }
  if (generation_ != my_generation) return absl::OkStatus();
  if (abort_reason_.code() == absl::StatusCode::kDeadlineExceeded) {
    return absl::DeadlineExceededError(absl::StrCat("LocalCommunicator ", op_name, " on rank ",
                                                    rank, ": ", abort_reason_.message()));
  }
  return absl::AbortedError(absl::StrCat("LocalCommunicator ", op_name, " on rank ", rank,
                                         ": group aborted: ", abort_reason_.message()));
}

absl::Status LocalGroup::CompleteLocked() {
  const Arrival& first = arrivals_[0];
  for (int r = 1; r < world_size_; ++r) {
    const Arrival& a = arrivals_[r];
    if (a.op != first.op || a.count != first.count || a.root != first.root) {
      return absl::InvalidArgumentError(absl::StrCat(
          "LocalCommunicator: collective mismatch: rank 0 called ", OpName(int(first.op)),
          "(count ", first.count, ", root ", first.root, ") but rank ", r, " called ",
          OpName(int(a.op)), "(count ", a.count, ", root ", a.root, ")"));
    }
  }
  const size_t n = first.count;
  switch (first.op) {
    case Op::kAllReduceSum: {
      // Every rank's buffer is both input and output, so sum into scratch first.
      scratch_.assign(static_cast<const float*>(arrivals_[0].in),
                      static_cast<const float*>(arrivals_[0].in) + n);
      for (int r = 1; r < world_size_; ++r) {
        const float* src = static_cast<const float*>(arrivals_[r].in);
        for (size_t i = 0; i < n; ++i) scratch_[i] += src[i];
      }
      for (const Arrival& a : arrivals_) {
        if (n > 0) std::memcpy(a.out, scratch_.data(), n * sizeof(float));
      }
      break;
    }
    case Op::kAllGather:
      // A send buffer may alias its own rank's slot of that rank's recv buffer; that
      // copy is then in place (memmove), and no other copy writes over a send buffer.
      for (const Arrival& dst : arrivals_) {
        for (int r = 0; r < world_size_; ++r) {
          if (n > 0) {
            std::memmove(static_cast<float*>(dst.out) + static_cast<size_t>(r) * n, arrivals_[r].in,
                         n * sizeof(float));
          }
        }
      }
      break;
    case Op::kBroadcast:
      for (int r = 0; r < world_size_; ++r) {
        if (r != first.root && n > 0 && arrivals_[r].out != arrivals_[first.root].out) {
          std::memcpy(arrivals_[r].out, arrivals_[first.root].out, n);
        }
      }
      break;
    case Op::kBarrier:
    case Op::kNone:
      break;
  }
  return absl::OkStatus();
}

LocalCommunicator::LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank)
    : group_(std::move(group)), rank_(rank) {
  if (rank < 0 || rank >= group_->world_size()) {
    std::fprintf(stderr, "LocalCommunicator: rank %d out of range for world size %d\n", rank,
                 group_->world_size());
    std::abort();
  }
}

absl::Status LocalCommunicator::AllReduceSum(float* data, size_t count) {
  return group_->Run(rank_, {LocalGroup::Op::kAllReduceSum, data, data, count, -1});
}

absl::Status LocalCommunicator::AllGather(const float* send, size_t count, float* recv) {
  return group_->Run(rank_, {LocalGroup::Op::kAllGather, send, recv, count, -1});
}

absl::Status LocalCommunicator::Broadcast(void* data, size_t bytes, int root) {
  if (root < 0 || root >= world_size()) {
    // Peers may already be waiting on this collective; abort so they fail now.
    absl::Status status = absl::InvalidArgumentError(
        absl::StrCat("LocalCommunicator Broadcast on rank ", rank_, ": root ", root,
                     " out of range for world size ", world_size()));
    absl::MutexLock lock(&group_->mu_);
    group_->AbortLocked(status);
    return status;
  }
  return group_->Run(rank_, {LocalGroup::Op::kBroadcast, data, data, bytes, root});
}

absl::Status LocalCommunicator::Barrier() {
  return group_->Run(rank_, {LocalGroup::Op::kBarrier, nullptr, nullptr, 0, -1});
}

std::vector<std::unique_ptr<LocalCommunicator>> MakeLocalCommunicators(
    int world_size, std::chrono::milliseconds timeout) {
  std::shared_ptr<LocalGroup> group = LocalGroup::Create(world_size, timeout);
  std::vector<std::unique_ptr<LocalCommunicator>> comms;
  for (int r = 0; r < world_size; ++r)
    comms.push_back(std::make_unique<LocalCommunicator>(group, r));
  return comms;
}

}  // namespace tessera
