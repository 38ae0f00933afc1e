#include "worker/comm/shm_communicator.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <new>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/rendezvous/kv_store_client.h"

namespace tessera {

namespace {

// memcpy/memmove with a null pointer is undefined even for 0 bytes, and zero-element
// collectives (which still synchronise the ranks) may pass null buffers.
void CopyBytes(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memmove(dst, src, bytes);
}

constexpr size_t kHeaderBytes = 4096;
constexpr int kMaxWorld = 32;
constexpr uint32_t kMagic = 0x54534d31;  // "TSM1"

enum OpCode : uint32_t { kAllReduce = 1, kAllGather = 2, kBroadcast = 3, kBarrierOp = 4 };

struct alignas(64) Cell {
  uint32_t op;
  int32_t root;
  uint64_t count;
};

long Futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* timeout) {
  // Not FUTEX_PRIVATE: the word lives in memory shared between processes.
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, timeout, nullptr, 0);
}

const char* OpName(uint32_t op) {
  switch (op) {
    case kAllReduce:
      return "AllReduceSum";
    case kAllGather:
      return "AllGather";
    case kBroadcast:
      return "Broadcast";
    case kBarrierOp:
      return "Barrier";
    default:
      return "none";
  }
}

}  // namespace

struct ShmCommunicator::Header {
  uint32_t magic;
  uint32_t world_size;
  uint64_t slot_bytes;
  alignas(64) std::atomic<uint32_t> arrived;
  alignas(64) std::atomic<uint32_t> generation;  // The futex word ranks sleep on.
  alignas(64) std::atomic<uint32_t> aborted;
  Cell cells[kMaxWorld];
};
static_assert(sizeof(ShmCommunicator::Header) <= kHeaderBytes);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

absl::StatusOr<std::unique_ptr<ShmCommunicator>> ShmCommunicator::Create(
    const ShmCommunicatorOptions& o) {
  const std::string where =
      absl::StrCat("ShmCommunicator setup (prefix '", o.prefix, "', rank ", o.rank, " of ",
                   o.world_size, ", store ", o.store_host, ":", o.store_port, ")");
  if (o.world_size < 1 || o.world_size > kMaxWorld || o.rank < 0 || o.rank >= o.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": rank/world out of range (at most ", kMaxWorld, " ranks)"));
  }
  if (o.prefix.empty() || o.slot_bytes < 64 || o.slot_bytes % 64 != 0 || o.timeout.count() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": need a prefix, a positive timeout and slot_bytes a multiple of 64 (got ",
        o.slot_bytes, ")"));
  }
  const absl::Duration timeout = absl::FromChrono(o.timeout);
  absl::StatusOr<std::unique_ptr<KvStoreClient>> store =
      KvStoreClient::Connect(o.store_host, o.store_port, timeout, o.store_security);
  if (!store.ok())
    return absl::Status(store.status().code(), absl::StrCat(where, ": ", store.status().message()));
  const size_t bytes = kHeaderBytes + o.slot_bytes * static_cast<size_t>(o.world_size);
  const std::string name_key = o.prefix + "/shm_name";
  std::string name;
  int fd = -1;
  if (o.rank == 0) {
    std::random_device rd;
    name = absl::StrCat("/tessera-shm-", ::getpid(), "-", rd());
    fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      const std::string err = std::strerror(errno);
      if (fd >= 0) {
        ::close(fd);
        ::shm_unlink(name.c_str());
      }
      return absl::UnavailableError(
          absl::StrCat(where, ": cannot create ", name, " of ", bytes, " bytes: ", err));
    }
  } else {
    absl::Status s = (*store)->Wait({name_key}, timeout);
    absl::StatusOr<std::string> got =
        s.ok() ? (*store)->Get(name_key) : absl::StatusOr<std::string>(s);
    if (!got.ok())
      return absl::Status(got.status().code(), absl::StrCat(where, ": ", got.status().message()));
    name = *got;
    fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
      return absl::UnavailableError(
          absl::StrCat(where, ": cannot open ", name, ": ", std::strerror(errno)));
    }
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) {
    if (o.rank == 0) ::shm_unlink(name.c_str());
    return absl::UnavailableError(
        absl::StrCat(where, ": mmap of ", bytes, " bytes: ", std::strerror(errno)));
  }
  std::unique_ptr<ShmCommunicator> comm(
      new ShmCommunicator(base, bytes, o.rank, o.world_size, o.slot_bytes, o.timeout));
  auto* header = static_cast<Header*>(base);
  absl::Status status;
  if (o.rank == 0) {
    // The fresh segment is zero-filled; construct the header before anyone can see it.
    header = new (base) Header{};
    header->magic = kMagic;
    header->world_size = static_cast<uint32_t>(o.world_size);
    header->slot_bytes = o.slot_bytes;
    status = (*store)->Set(name_key, name);
    std::vector<std::string> ready;
    for (int r = 1; r < o.world_size; ++r)
      ready.push_back(absl::StrCat(o.prefix, "/shm_ready/", r));
    if (status.ok()) status = (*store)->Wait(ready, timeout);
    // Everyone has it mapped (or gave up): drop the name so nothing outlives the group.
    ::shm_unlink(name.c_str());
  } else {
    if (header->magic != kMagic || header->world_size != static_cast<uint32_t>(o.world_size) ||
        header->slot_bytes != o.slot_bytes) {
      status = absl::FailedPreconditionError(absl::StrCat(
          "segment ", name, " was made for world ", header->world_size, " slot ",
          header->slot_bytes, " bytes, not world ", o.world_size, " slot ", o.slot_bytes));
    } else {
      status = (*store)->Set(absl::StrCat(o.prefix, "/shm_ready/", o.rank), "1");
    }
  }
  if (!status.ok()) return absl::Status(status.code(), absl::StrCat(where, ": ", status.message()));
  return comm;
}

ShmCommunicator::ShmCommunicator(void* base, size_t mapped_bytes, int rank, int world_size,
                                 size_t slot_bytes, std::chrono::milliseconds timeout)
    : base_(base),
      mapped_bytes_(mapped_bytes),
      rank_(rank),
      world_size_(world_size),
      slot_bytes_(slot_bytes),
      timeout_(timeout) {}

ShmCommunicator::~ShmCommunicator() { ::munmap(base_, mapped_bytes_); }

char* ShmCommunicator::slot(int r) const {
  return static_cast<char*>(base_) + kHeaderBytes + slot_bytes_ * static_cast<size_t>(r);
}

bool ShmCommunicator::aborted() const {
  return aborted_.load(std::memory_order_acquire) ||
         static_cast<Header*>(base_)->aborted.load(std::memory_order_acquire) != 0;
}

void ShmCommunicator::Abort() {
  // abort_reason_ stays the collective thread's to write; this only raises the flags.
  auto* h = static_cast<Header*>(base_);
  aborted_.store(true, std::memory_order_release);
  h->aborted.store(1, std::memory_order_release);
  Futex(&h->generation, FUTEX_WAKE, INT_MAX, nullptr);
}

absl::Status ShmCommunicator::Fail(const char* op, absl::StatusCode code, std::string why) {
  auto* h = static_cast<Header*>(base_);
  if (!aborted_.exchange(true)) abort_reason_ = absl::StrCat(op, ": ", why);
  h->aborted.store(1, std::memory_order_release);
  Futex(&h->generation, FUTEX_WAKE, INT_MAX, nullptr);  // Wake sleepers to see the flag.
  return absl::Status(code,
                      absl::StrCat("ShmCommunicator ", op, " on rank ", rank_, " of ", world_size_,
                                   " (timeout ", timeout_.count(), " ms): ", why));
}

absl::Status ShmCommunicator::Wait(const char* op, absl::Time deadline) {
  auto* h = static_cast<Header*>(base_);
  const uint32_t gen = h->generation.load(std::memory_order_acquire);
  if (h->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 ==
      static_cast<uint32_t>(world_size_)) {
    // The next barrier can only start after its ranks see the new generation, so the
    // reset is visible to them (release on the generation bump).
    h->arrived.store(0, std::memory_order_relaxed);
    h->generation.fetch_add(1, std::memory_order_release);
    Futex(&h->generation, FUTEX_WAKE, INT_MAX, nullptr);
    return absl::OkStatus();
  }
  for (int spin = 0; spin < 256; ++spin) {
    if (h->generation.load(std::memory_order_acquire) != gen) return absl::OkStatus();
    if (h->aborted.load(std::memory_order_acquire) != 0) break;
    std::this_thread::yield();
  }
  while (h->generation.load(std::memory_order_acquire) == gen) {
    if (h->aborted.load(std::memory_order_acquire) != 0) {
      return Fail(op, absl::StatusCode::kAborted,
                  "another rank aborted the group (it timed out or failed)");
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return Fail(op, absl::StatusCode::kDeadlineExceeded,
                  absl::StrCat("only some of the ", world_size_, " ranks arrived in time"));
    }
    const timespec ts = absl::ToTimespec(std::min(left, absl::Milliseconds(50)));
    Futex(&h->generation, FUTEX_WAIT, gen, &ts);
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::Begin(const char* op, uint32_t op_code, uint64_t count,
                                    int32_t root) {
  if (aborted()) {
    return absl::AbortedError(absl::StrCat("ShmCommunicator ", op, " on rank ", rank_,
                                           ": group aborted earlier",
                                           abort_reason_.empty() ? "" : ": ", abort_reason_));
  }
  static_cast<Header*>(base_)->cells[rank_] = Cell{op_code, root, count};
  return absl::OkStatus();
}

// Every collective: announce, then per chunk stage -> barrier -> consume -> barrier. The
// cells are checked after the first barrier; the closing barrier keeps a fast rank from
// overwriting slots or cells a slow rank still reads.
absl::Status ShmCommunicator::CheckCells(const char* op) {
  const Cell mine = static_cast<Header*>(base_)->cells[rank_];
  for (int r = 0; r < world_size_; ++r) {
    const Cell c = static_cast<Header*>(base_)->cells[r];
    if (c.op != mine.op || c.count != mine.count || c.root != mine.root) {
      return Fail(
          op, absl::StatusCode::kInvalidArgument,
          absl::StrCat("collective mismatch: rank ", rank_, " called ", OpName(mine.op), "(count ",
                       mine.count, ", root ", mine.root, ") but rank ", r, " called ", OpName(c.op),
                       "(count ", c.count, ", root ", c.root, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::AllReduceSum(float* data, size_t count) {
  const absl::Time deadline = absl::Now() + absl::FromChrono(timeout_);
  if (absl::Status s = Begin("AllReduceSum", kAllReduce, count, -1); !s.ok()) return s;
  const size_t chunk = slot_bytes_ / sizeof(float);
  size_t off = 0;
  do {
    const size_t n = std::min(chunk, count - off);
    CopyBytes(slot(rank_), data + off, n * sizeof(float));
    if (absl::Status s = Wait("AllReduceSum", deadline); !s.ok()) return s;
    if (off == 0) {
      if (absl::Status s = CheckCells("AllReduceSum"); !s.ok()) return s;
    }
    // Rank order, identical on every rank.
    float* out = data + off;
    CopyBytes(out, slot(0), n * sizeof(float));
    for (int r = 1; r < world_size_; ++r) {
      const float* in = reinterpret_cast<const float*>(slot(r));
      for (size_t i = 0; i < n; ++i) out[i] += in[i];
    }
    if (absl::Status s = Wait("AllReduceSum", deadline); !s.ok()) return s;
    off += n;
  } while (off < count);
  return absl::OkStatus();
}

absl::Status ShmCommunicator::AllGather(const float* send, size_t count, float* recv) {
  const absl::Time deadline = absl::Now() + absl::FromChrono(timeout_);
  if (absl::Status s = Begin("AllGather", kAllGather, count, -1); !s.ok()) return s;
  const size_t chunk = slot_bytes_ / sizeof(float);
  size_t off = 0;
  do {
    const size_t n = std::min(chunk, count - off);
    CopyBytes(slot(rank_), send + off, n * sizeof(float));
    if (absl::Status s = Wait("AllGather", deadline); !s.ok()) return s;
    if (off == 0) {
      if (absl::Status s = CheckCells("AllGather"); !s.ok()) return s;
    }
    for (int r = 0; r < world_size_; ++r) {
      // memmove: rank_'s own slice may be the (in-place) send buffer.
      CopyBytes(recv + static_cast<size_t>(r) * count + off, slot(r), n * sizeof(float));
    }
    if (absl::Status s = Wait("AllGather", deadline); !s.ok()) return s;
    off += n;
  } while (off < count);
  return absl::OkStatus();
}

absl::Status ShmCommunicator::Broadcast(void* data, size_t bytes, int root) {
  const absl::Time deadline = absl::Now() + absl::FromChrono(timeout_);
  if (absl::Status s = Begin("Broadcast", kBroadcast, bytes, root); !s.ok()) return s;
  if (root < 0 || root >= world_size_) {
    return Fail("Broadcast", absl::StatusCode::kInvalidArgument,
                absl::StrCat("root ", root, " out of range for world size ", world_size_));
  }
  char* p = static_cast<char*>(data);
  size_t off = 0;
  do {
    const size_t n = std::min(slot_bytes_, bytes - off);
    if (rank_ == root) CopyBytes(slot(root), p + off, n);
    if (absl::Status s = Wait("Broadcast", deadline); !s.ok()) return s;
    if (off == 0) {
      if (absl::Status s = CheckCells("Broadcast"); !s.ok()) return s;
    }
    if (rank_ != root) CopyBytes(p + off, slot(root), n);
    if (absl::Status s = Wait("Broadcast", deadline); !s.ok()) return s;
    off += n;
  } while (off < bytes);
  return absl::OkStatus();
}

absl::Status ShmCommunicator::Barrier() {
  const absl::Time deadline = absl::Now() + absl::FromChrono(timeout_);
  if (absl::Status s = Begin("Barrier", kBarrierOp, 0, -1); !s.ok()) return s;
  if (absl::Status s = Wait("Barrier", deadline); !s.ok()) return s;
  if (absl::Status s = CheckCells("Barrier"); !s.ok()) return s;
  return Wait("Barrier", deadline);
}

}  // namespace tessera
