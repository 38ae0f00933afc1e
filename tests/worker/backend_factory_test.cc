// Choosing the backend from a --device string: the CPU always works; CUDA either works or
// says clearly why not (not built in, no device), never crashes.
#include "worker/backend_factory.h"

#include <stdlib.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(BackendFactoryTest, CpuBackendIsDescribedForRegistration) {
  auto backend = MakeBackend("cpu", 1);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->name(), "cpu");
  const DeviceDescription d = DescribeBackend(**backend);
  EXPECT_EQ(d.kind, "cpu");
  EXPECT_FALSE(d.name.empty());
  EXPECT_EQ(d.ordinal, -1);
  EXPECT_GT(d.free_memory_bytes, 0u);
  EXPECT_GE(d.total_memory_bytes, d.free_memory_bytes);
  EXPECT_TRUE(BackendError(**backend).ok());
  EXPECT_TRUE(BindBackendToThread(**backend).ok());
  EXPECT_FALSE(CudaPlacementOf(**backend).has_value());
}

TEST(BackendFactoryTest, UnknownDeviceIsAnInvalidArgumentNamingIt) {
  for (const char* device : {"bogus", "", "gpu", "CUDA", "cuda:", "cuda:x", "cuda:-1", "cpu:0"}) {
    auto backend = MakeBackend(device, 1);
    ASSERT_FALSE(backend.ok()) << device;
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument) << device;
    EXPECT_NE(backend.status().message().find(absl::StrCat("\"", device, "\"")),
              absl::string_view::npos)
        << backend.status();
  }
}

// Here (no GPU) this checks the error; on a GPU machine, that the device is described.
TEST(BackendFactoryTest, CudaIsABackendOrAClearError) {
  auto backend = MakeBackend("cuda", 1);
  if (backend.ok()) {
    ASSERT_TRUE(CudaBuiltIn());
    const DeviceDescription d = DescribeBackend(**backend);
    EXPECT_EQ(d.kind, "cuda");
    EXPECT_EQ(d.ordinal, 0);
    EXPECT_GT(d.total_memory_bytes, 0u);
    EXPECT_TRUE(CudaPlacementOf(**backend).has_value());
    return;
  }
  if (!CudaBuiltIn()) {
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(backend.status().message().find("no CUDA backend"), absl::string_view::npos)
        << backend.status();
    return;
  }
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StartsWith(backend.status().message(), "no CUDA device: "))
      << backend.status();
}

// TESSERA_CUDA_ACTIVATIONS takes bf16 (the default) or f32; anything else is refused by
// name, with or without a device. With a device, the backend reports the dtype asked for.
TEST(BackendFactoryTest, CudaActivationDtypeFromTheEnvironment) {
  if (!CudaBuiltIn()) GTEST_SKIP() << "this build has no CUDA backend";
  ::setenv("TESSERA_CUDA_ACTIVATIONS", "fp16", 1);
  auto bad = MakeBackend("cuda", 1);
  ::unsetenv("TESSERA_CUDA_ACTIVATIONS");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  EXPECT_NE(bad.status().message().find("TESSERA_CUDA_ACTIVATIONS=fp16"),
            absl::string_view::npos)
      << bad.status();
  for (const char* value : {"f32", "bf16", ""}) {
    SCOPED_TRACE(value);
    ::setenv("TESSERA_CUDA_ACTIVATIONS", value, 1);
    auto backend = MakeBackend("cuda", 1);
    ::unsetenv("TESSERA_CUDA_ACTIVATIONS");
    if (!backend.ok()) {
      EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnavailable) << backend.status();
      continue;
    }
    EXPECT_EQ((*backend)->activation_dtype(),
              std::string(value) == "f32" ? DType::kF32 : DType::kBF16);
  }
}

TEST(BackendFactoryTest, MissingCudaOrdinalIsAnError) {
  auto backend = MakeBackend("cuda:4096", 1);
  ASSERT_FALSE(backend.ok());
  EXPECT_NE(backend.status().code(), absl::StatusCode::kInvalidArgument) << backend.status();
}

TEST(BackendFactoryTest, AutoFallsBackToTheCpuWithoutADevice) {
  auto backend = MakeBackend("auto", 1);
  ASSERT_TRUE(backend.ok()) << backend.status();
  const bool have_cuda = MakeBackend("cuda", 1).ok();
  EXPECT_EQ((*backend)->name(), have_cuda ? "cuda" : "cpu");
}

}  // namespace
}  // namespace tessera
