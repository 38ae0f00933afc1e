// HostStagedCommunicator over real host communicators (in-process, shm, Gloo) at 2 and 4
// ranks: every collective gives the bits the inner communicator gives on the same host
// inputs. The ranks' buffers live in a backend whose memory the host cannot read through
// the pointer (as with a GPU): a collective that skipped a staging copy, ran the inner
// collective on the device pointer, or copied back before reducing, gets other values.
#include "worker/comm/host_staged_communicator.h"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/rendezvous/kv_store_server.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/comm/local_communicator.h"
#include "worker/comm/shm_communicator.h"

namespace tessera {
namespace {

using std::chrono::milliseconds;

// Device memory the host cannot use directly: Allocate hands out decoy addresses filled
// with NaN bytes, the real contents live elsewhere, and only CopyToHost / CopyToDevice
// translate. Reading a decoy yields NaNs; writing one changes nothing the copies see.
class DeviceLikeBackend final : public kernels::Backend {
 public:
  ~DeviceLikeBackend() override = default;
  std::string_view name() const override { return "device-like"; }

  void* Allocate(size_t bytes) override {
    auto decoy = std::make_unique<char[]>(bytes);
    std::memset(decoy.get(), 0xff, bytes);  // NaN as floats, BF16 and F16.
    void* address = decoy.get();
    memory_[address] = {std::move(decoy), std::vector<char>(bytes), bytes};
    return address;
  }
  void Free(void* ptr) override { memory_.erase(ptr); }
  void CopyToDevice(void* dst, const void* host_src, size_t bytes) override {
    EXPECT_EQ(Resolve(host_src, bytes, /*expect_device=*/false), nullptr)
        << "CopyToDevice from device memory";
    if (char* d = Resolve(dst, bytes, /*expect_device=*/true)) std::memcpy(d, host_src, bytes);
  }
  void CopyToHost(void* host_dst, const void* src, size_t bytes) override {
    EXPECT_EQ(Resolve(host_dst, bytes, /*expect_device=*/false), nullptr)
        << "CopyToHost into device memory";
    if (char* s = Resolve(src, bytes, /*expect_device=*/true)) std::memcpy(host_dst, s, bytes);
  }
  void Synchronize() override {}
  size_t FreeMemoryBytes() const override { return size_t{1} << 30; }

  // The ops are not used here.
  void EmbeddingGather(const int32_t*, int, kernels::MatrixView, int64_t, float*) override {
    Unused();
  }
  void RmsNorm(const float*, const float*, int, int, float, void*) override { Unused(); }
  void AddRmsNorm(float*, const void*, const float*, int, int, float, void*) override { Unused(); }
  using kernels::Backend::Gemm;
  void Gemm(const void*, int64_t, kernels::MatrixView, void*, DType) override { Unused(); }
  void Rope(void*, int, int, const int32_t*, int, int, int, const float*, float) override {
    Unused();
  }
  void AddBias(void*, const float*, int, int) override { Unused(); }
  void SiluMul(const void*, int, int, void*) override { Unused(); }
  void WriteKvCache(const void*, const void*, int, const int64_t*, int,
                    const kernels::KvCacheShape&, void*, void*) override {
    Unused();
  }
  void PagedAttention(const void*, int, const kernels::AttentionBatch&, const void*, const void*,
                      const kernels::KvCacheShape&, int, float, void*) override {
    Unused();
  }
  void Add(void*, const void*, size_t) override { Unused(); }
  void HeadRmsNorm(void*, int, int, int, int, const float*, float) override { Unused(); }
  void MoeRoute(const float*, int, int, int, bool, int32_t*, float*) override { Unused(); }
  void MoeExperts(const void*, int, int, const int32_t*, const float*, int,
                  const kernels::ExpertWeights&, void*) override {
    Unused();
  }
  void AddSigmoidGated(void*, const void*, const float*, int, int) override { Unused(); }

  // Test helpers: device buffers filled from and read into host vectors.
  template <typename T>
  T* Upload(const std::vector<T>& host) {
    void* device = Allocate(host.size() * sizeof(T));
    CopyToDevice(device, host.data(), host.size() * sizeof(T));
    return static_cast<T*>(device);
  }
  template <typename T>
  std::vector<T> Download(const T* device, size_t count) {
    std::vector<T> host(count);
    CopyToHost(host.data(), device, count * sizeof(T));
    return host;
  }

 private:
  struct Allocation {
    std::unique_ptr<char[]> decoy;
    std::vector<char> contents;
    size_t bytes = 0;
  };

  // The real contents behind [ptr, ptr + bytes) of an allocation; nullptr (and a failure
  // when `expect_device`) for host memory or a range past an allocation's end.
  char* Resolve(const void* ptr, size_t bytes, bool expect_device) {
    const char* p = static_cast<const char*>(ptr);
    auto it = memory_.upper_bound(const_cast<void*>(ptr));
    if (it != memory_.begin()) {
      --it;
      const char* base = static_cast<const char*>(it->first);
      if (p >= base && p + bytes <= base + it->second.bytes) {
        return it->second.contents.data() + (p - base);
      }
    }
    if (expect_device) ADD_FAILURE() << "a copy names host memory as device memory";
    return nullptr;
  }
  static void Unused() { ADD_FAILURE() << "DeviceLikeBackend ops are not used in this test"; }

  std::map<void*, Allocation> memory_;
};

enum class Inner { kLocal, kShm, kGloo };

struct Param {
  Inner inner;
  int world;
};

std::string InnerName(Inner inner) {
  switch (inner) {
    case Inner::kLocal:
      return "local";
    case Inner::kShm:
      return "shm";
    case Inner::kGloo:
      return "gloo";
  }
  return "?";
}

void RunRanks(int world, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back([&, r] { fn(r); });
  for (auto& t : threads) t.join();
}

// Order-sensitive values (only the same summation order reproduces the same bits),
// different for every rank and call: stale staging from an earlier call is visible.
float Value(int rank, size_t i, int call) {
  const float magnitudes[] = {1e6f, 1.0f, -1e6f, 3.0f};
  return magnitudes[rank % 4] * (1.0f + static_cast<float>((i + call) % 7) * 0.125f) +
         static_cast<float>(call) * 0.0625f;
}

class HostStagedCommunicatorTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    if (GetParam().inner != Inner::kLocal) {
      auto server = KvStoreServer::Start("127.0.0.1", 0);
      ASSERT_TRUE(server.ok()) << server.status();
      server_ = std::move(*server);
    }
    // Two groups of the inner kind: one under the host-staged wrapper, one on host
    // buffers for the expected results.
    std::vector<std::unique_ptr<Communicator>> inner = MakeGroup("staged");
    reference_ = MakeGroup("reference");
    ASSERT_EQ(inner.size(), static_cast<size_t>(world()));
    ASSERT_EQ(reference_.size(), static_cast<size_t>(world()));
    for (int r = 0; r < world(); ++r) {
      backends_.push_back(std::make_unique<DeviceLikeBackend>());
      staged_.push_back(
          std::make_unique<HostStagedCommunicator>(std::move(inner[r]), backends_[r].get()));
    }
  }

  int world() const { return GetParam().world; }

  std::vector<std::unique_ptr<Communicator>> MakeGroup(const std::string& prefix) {
    const int world = GetParam().world;
    const milliseconds timeout(20000);
    std::vector<std::unique_ptr<Communicator>> comms(world);
    if (GetParam().inner == Inner::kLocal) {
      auto local = MakeLocalCommunicators(world, timeout);
      for (int r = 0; r < world; ++r) comms[r] = std::move(local[r]);
      return comms;
    }
    RunRanks(world, [&](int r) {
      absl::StatusOr<std::unique_ptr<Communicator>> comm;
      if (GetParam().inner == Inner::kShm) {
        ShmCommunicatorOptions o;
        o.store_port = server_->port();
        o.prefix = prefix;
        o.rank = r;
        o.world_size = world;
        o.timeout = timeout;
        o.slot_bytes = 512;  // Small: the larger collectives below run in chunks.
        comm = ShmCommunicator::Create(o);
      } else {
        GlooCommunicatorOptions o;
        o.store_port = server_->port();
        o.prefix = prefix;
        o.rank = r;
        o.world_size = world;
        o.timeout = timeout;
        comm = GlooCommunicator::Create(o);
      }
      if (comm.ok()) {
        comms[r] = std::move(*comm);
      } else {
        ADD_FAILURE() << "rank " << r << ": " << comm.status();
      }
    });
    return comms;
  }

  std::unique_ptr<KvStoreServer> server_;
  std::vector<std::unique_ptr<DeviceLikeBackend>> backends_;
  std::vector<std::unique_ptr<Communicator>> staged_;
  std::vector<std::unique_ptr<Communicator>> reference_;
};

TEST_P(HostStagedCommunicatorTest, NamesItselfAfterTheInnerAndIsNeverCapturable) {
  for (int r = 0; r < world(); ++r) {
    EXPECT_EQ(staged_[r]->backend_name(), InnerName(GetParam().inner) + "+host-staged");
    EXPECT_EQ(staged_[r]->rank(), r);
    EXPECT_EQ(staged_[r]->world_size(), world());
    EXPECT_FALSE(staged_[r]->Capturable());  // Host round trips cannot be recorded.
    EXPECT_TRUE(staged_[r]->Wait().ok());
    EXPECT_FALSE(staged_[r]->aborted());
  }
}

// Successive calls of other sizes (larger, smaller, larger: the staging is reused) each
// give the inner communicator's bits.
TEST_P(HostStagedCommunicatorTest, AllReduceF32EqualsTheInnerCommunicators) {
  const std::vector<size_t> counts = {1000, 37, 1, 2500};
  for (int call = 0; call < static_cast<int>(counts.size()); ++call) {
    SCOPED_TRACE(absl::StrCat("call ", call, ", count ", counts[call]));
    const size_t count = counts[call];
    std::vector<std::vector<float>> got(world()), want(world());
    RunRanks(world(), [&](int r) {
      std::vector<float> input(count);
      for (size_t i = 0; i < count; ++i) input[i] = Value(r, i, call);
      want[r] = input;
      EXPECT_TRUE(reference_[r]->AllReduceSum(want[r].data(), count).ok());
      DeviceLikeBackend& be = *backends_[r];
      float* device = be.Upload(input);
      // Half the calls through the dtype overload, as the forward pass reduces projections.
      const absl::Status s = call % 2 == 0 ? staged_[r]->AllReduceSum(device, count)
                                           : staged_[r]->AllReduceSum(device, count, DType::kF32);
      EXPECT_TRUE(s.ok()) << "rank " << r << ": " << s;
      got[r] = be.Download(device, count);
      be.Free(device);
    });
    for (int r = 0; r < world(); ++r) {
      ASSERT_EQ(got[r].size(), count);
      EXPECT_EQ(std::memcmp(got[r].data(), want[r].data(), count * sizeof(float)), 0)
          << "rank " << r << ": element 0 is " << got[r][0] << ", the inner gives " << want[r][0];
    }
  }
}

// BF16 and F16 activations: widened, reduced by the inner communicator in float32, rounded
// back once, identical on every rank.
TEST_P(HostStagedCommunicatorTest, AllReduceOf16BitActivationsSumsInFloat32) {
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const size_t count = 777;  // Odd: the staging rounds the 16-bit half up.
    auto to16 = [dtype](float f) { return dtype == DType::kBF16 ? F32ToBf16(f) : F32ToF16(f); };
    std::vector<std::vector<uint16_t>> got(world()), want(world());
    RunRanks(world(), [&](int r) {
      std::vector<uint16_t> input(count);
      std::vector<float> widened(count);
      for (size_t i = 0; i < count; ++i) {
        // Within F16's range, with bits below BF16's precision so the float32 sum matters.
        input[i] = to16((r + 1) * 0.3f + static_cast<float>(i % 11) * 1.01f - 5.0f);
      }
      for (size_t i = 0; i < count; ++i) {
        widened[i] = dtype == DType::kBF16 ? Bf16ToF32(input[i]) : F16ToF32(input[i]);
      }
      EXPECT_TRUE(reference_[r]->AllReduceSum(widened.data(), count).ok());
      for (float f : widened) want[r].push_back(to16(f));
      DeviceLikeBackend& be = *backends_[r];
      uint16_t* device = be.Upload(input);
      const absl::Status s = staged_[r]->AllReduceSum(device, count, dtype);
      EXPECT_TRUE(s.ok()) << "rank " << r << ": " << s;
      got[r] = be.Download(device, count);
      be.Free(device);
    });
    for (int r = 0; r < world(); ++r) {
      EXPECT_EQ(got[r], want[r]) << "rank " << r;
      EXPECT_EQ(got[r], got[0]) << "rank " << r << " differs from rank 0";
    }
  }
}

TEST_P(HostStagedCommunicatorTest, RefusesOtherDtypesWithoutAnyCollective) {
  for (int r = 0; r < world(); ++r) {
    int8_t* device = static_cast<int8_t*>(backends_[r]->Allocate(16));
    const absl::Status s = staged_[r]->AllReduceSum(device, 16, DType::kI8);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
    EXPECT_NE(s.message().find("I8"), std::string_view::npos) << s;
    EXPECT_FALSE(staged_[r]->aborted());
  }
}

TEST_P(HostStagedCommunicatorTest, AllGatherEqualsTheInnerCommunicators) {
  for (int call = 0; call < 2; ++call) {
    const size_t count = call == 0 ? 301 : 5;
    SCOPED_TRACE(absl::StrCat("count ", count));
    std::vector<std::vector<float>> got(world()), want(world());
    RunRanks(world(), [&](int r) {
      std::vector<float> send(count);
      for (size_t i = 0; i < count; ++i) send[i] = Value(r, i, call);
      want[r].resize(count * world());
      EXPECT_TRUE(reference_[r]->AllGather(send.data(), count, want[r].data()).ok());
      DeviceLikeBackend& be = *backends_[r];
      float* device_send = be.Upload(send);
      auto* device_recv = static_cast<float*>(be.Allocate(count * world() * sizeof(float)));
      const absl::Status s = staged_[r]->AllGather(device_send, count, device_recv);
      EXPECT_TRUE(s.ok()) << "rank " << r << ": " << s;
      got[r] = be.Download(device_recv, count * world());
      be.Free(device_send);
      be.Free(device_recv);
    });
    for (int r = 0; r < world(); ++r) EXPECT_EQ(got[r], want[r]) << "rank " << r;
  }
}

TEST_P(HostStagedCommunicatorTest, BroadcastCopiesTheRootsBytesEverywhere) {
  const int root = world() - 1;
  const size_t bytes = 1037;  // Not a whole number of floats.
  std::vector<std::vector<char>> got(world());
  std::vector<char> root_bytes(bytes);
  for (size_t i = 0; i < bytes; ++i) root_bytes[i] = static_cast<char>(i * 7 + 1);
  RunRanks(world(), [&](int r) {
    std::vector<char> mine =
        r == root ? root_bytes : std::vector<char>(bytes, static_cast<char>(r));
    DeviceLikeBackend& be = *backends_[r];
    char* device = be.Upload(mine);
    const absl::Status s = staged_[r]->Broadcast(device, bytes, root);
    EXPECT_TRUE(s.ok()) << "rank " << r << ": " << s;
    EXPECT_TRUE(staged_[r]->Barrier().ok());
    got[r] = be.Download(device, bytes);
    be.Free(device);
  });
  for (int r = 0; r < world(); ++r) EXPECT_EQ(got[r], root_bytes) << "rank " << r;
}

// An inner communicator that records what reaches it; its collectives fail with `error`
// after scribbling over the host buffer they were given.
class RecordingCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  std::string_view backend_name() const override { return "recording"; }
  using Communicator::AllReduceSum;
  absl::Status AllReduceSum(float* data, size_t count) override {
    for (size_t i = 0; i < count; ++i) data[i] = -1.0f;
    return error;
  }
  absl::Status AllGather(const float*, size_t count, float* recv) override {
    for (size_t i = 0; i < count * world_size(); ++i) recv[i] = -1.0f;
    return error;
  }
  absl::Status Broadcast(void* data, size_t bytes, int) override {
    std::memset(data, 0x7f, bytes);
    return error;
  }
  absl::Status Barrier() override {
    ++barriers;
    return absl::OkStatus();
  }
  absl::Status Wait() override {
    ++waits;
    return absl::DeadlineExceededError("a queued collective timed out");
  }
  bool Capturable() const override { return true; }
  bool aborted() const override { return aborted_; }
  void Abort() override { aborted_ = true; }

  absl::Status error;
  int barriers = 0;
  int waits = 0;

 private:
  bool aborted_ = false;
};

// Barrier, Wait, Abort and aborted() are the inner communicator's; Capturable() is not,
// even where the inner one could be recorded, since the staging copies cannot.
TEST(HostStagedCommunicatorPassThroughTest, ForwardsTheGroupStateButNeverCaptures) {
  auto inner = std::make_unique<RecordingCommunicator>();
  RecordingCommunicator* recording = inner.get();
  DeviceLikeBackend backend;
  HostStagedCommunicator staged(std::move(inner), &backend);
  EXPECT_EQ(staged.backend_name(), "recording+host-staged");
  EXPECT_FALSE(staged.Capturable());
  EXPECT_TRUE(staged.Barrier().ok());
  EXPECT_EQ(recording->barriers, 1);
  EXPECT_EQ(staged.Wait().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(recording->waits, 1);
  EXPECT_FALSE(staged.aborted());
  staged.Abort();
  EXPECT_TRUE(recording->aborted());
  EXPECT_TRUE(staged.aborted());
}

// A failed collective (a dead peer, a timeout) returns its error and leaves the device
// buffer as it was: half-reduced host staging never reaches the device.
TEST(HostStagedCommunicatorPassThroughTest, AFailedCollectiveLeavesTheDeviceBufferAlone) {
  auto inner = std::make_unique<RecordingCommunicator>();
  inner->error = absl::AbortedError("peer died");
  DeviceLikeBackend backend;
  HostStagedCommunicator staged(std::move(inner), &backend);
  const std::vector<float> ones(8, 1.0f);
  float* device = backend.Upload(ones);
  EXPECT_EQ(staged.AllReduceSum(device, 8).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(staged.AllReduceSum(device, 8, DType::kBF16).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(staged.Broadcast(device, 8 * sizeof(float), /*root=*/1).code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(backend.Download(device, 8), ones);
  float* gathered = backend.Upload(std::vector<float>(16, 2.0f));
  EXPECT_EQ(staged.AllGather(device, 8, gathered).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(backend.Download(gathered, 16), std::vector<float>(16, 2.0f));
}

INSTANTIATE_TEST_SUITE_P(Groups, HostStagedCommunicatorTest,
                         ::testing::Values(Param{Inner::kLocal, 2}, Param{Inner::kLocal, 4},
                                           Param{Inner::kShm, 2}, Param{Inner::kShm, 4},
                                           Param{Inner::kGloo, 2}, Param{Inner::kGloo, 4}),
                         [](const auto& info) {
                           return absl::StrCat(InnerName(info.param.inner), "_tp",
                                               info.param.world);
                         });

}  // namespace
}  // namespace tessera
