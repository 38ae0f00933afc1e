// The serving path on a CUDA device: a coordinator and a `tessera-worker --device cuda`
// generate llama2.c's reference, with the KV cache sized from the device memory left after
// loading. Skips where no device is usable.
#include <stdlib.h>

#include <string>

#include "gtest/gtest.h"
#include "tests/e2e/serving_util.h"
#include "tests/support/cluster.h"
#include "tests/support/test_model.h"
#include "tests/worker/test_expected.h"
#include "worker/backend_factory.h"

namespace tessera {
namespace {

using ::tessera::testing::GreedyText;
using ::tessera::testing::RunUnary;
using ::tessera::testing::StartStories;

TEST(ServingCudaTest, CudaWorkerMatchesReference) {
  TESSERA_REQUIRE_STORIES_MODEL();
  if (auto backend = MakeBackend("cuda", 0); !backend.ok()) {
    GTEST_SKIP() << "no usable CUDA device: " << backend.status();
  }
  const auto expected = testing::LoadExpected();
  // Float32 activations, so the whole 60-token reference is the bar (the workers inherit
  // the environment); cuda_forward_test checks what the default BF16 activations promise.
  ::setenv("TESSERA_CUDA_ACTIVATIONS", "f32", 1);
  testing::ClusterOptions options;
  options.worker_flags = {"--device=cuda"};
  options.kv_memory_mb = -1;  // Not passed: the KV cache comes from the fraction below.
  options.coordinator_flags = {"--kv-memory-fraction=0.05"};
  auto cluster = StartStories(/*tp=*/1, /*replicas=*/1, options);
  ::unsetenv("TESSERA_CUDA_ACTIVATIONS");
  ASSERT_NE(cluster, nullptr);
  const auto unary = RunUnary(cluster->api(), GreedyText("Once upon a time", 60));
  ASSERT_TRUE(unary.status.ok()) << unary.status.error_message() << "\n" << cluster->Logs();
  EXPECT_EQ(unary.ids(), expected.generated_ids);
  EXPECT_EQ("Once upon a time" + unary.response.text(), expected.generated_text);
  const std::string logs = cluster->Logs(/*tail_bytes=*/1 << 20);
  EXPECT_NE(logs.find("tessera-worker: computing on cuda"), std::string::npos) << logs;
}

}  // namespace
}  // namespace tessera
