// The CUDA forward pass of the Llama-family variants against the CPU backend (which
// tests/worker/reference_forward_test.cc checks against the numpy reference): llama3 and
// yarn rope scaling past the original context, Qwen2 q/k/v biases with a sliding window on
// later layers, Mistral's sliding window. Generated tiny checkpoints; skips without a device.
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/test_model.h"
#include "tools/checkpoint/generate.h"
#include "worker/backend_factory.h"
#include "worker/communicator.h"
#include "worker/llama_model.h"
#include "worker/single_sequence.h"

namespace tessera {
namespace {

absl::StatusOr<SingleSequenceResult> Generate(const std::filesystem::path& dir,
                                         kernels::Backend* backend,
                                         const std::vector<int32_t>& prompt, int chunk) {
  SingleRankCommunicator comm;
  auto model = LlamaModel::Load(dir, backend, &comm);
  if (!model.ok()) return model.status();
  auto cache = (*model)->CreateKvCache(20, 16);
  if (!cache.ok()) return cache.status();
  SingleSequenceOptions o;
  o.max_new_tokens = 24;
  o.sampling.temperature = 0;
  o.ignore_eos = true;
  o.prefill_chunk = chunk;
  return GenerateSingleSequence(**model, **cache, prompt, o);
}

struct Variant {
  const char* preset;
  std::function<void(ModelConfig*)> adjust;
};

class CudaVariantsForwardTest : public ::testing::TestWithParam<Variant> {};

// Float32 activations (TESSERA_CUDA_ACTIVATIONS=f32): the exact twin of the CPU backend.
// What the default BF16 activations promise is checked in cuda_forward_test.
TEST_P(CudaVariantsForwardTest, GreedyAndLogitsMatchCpu) {
  ::setenv("TESSERA_CUDA_ACTIVATIONS", "f32", 1);
  auto cuda = MakeBackend("cuda", 0);
  ::unsetenv("TESSERA_CUDA_ACTIVATIONS");
  if (!cuda.ok()) GTEST_SKIP() << "no usable CUDA device: " << cuda.status();
  auto config = PresetConfig(GetParam().preset);
  ASSERT_TRUE(config.ok()) << config.status();
  if (GetParam().adjust) GetParam().adjust(&*config);
  const auto dir = testing::ScratchDir("model");
  GenerateOptions options;
  options.out_dir = dir;
  options.dtype = DType::kF32;
  options.seed = 5;
  ASSERT_TRUE(GenerateRandomCheckpoint(*config, options).ok());
  std::vector<int32_t> prompt(150);
  for (int i = 0; i < 150; ++i) prompt[i] = 3 + (i * 7919 + 11) % (config->vocab_size - 3);

  auto cpu = kernels::MakeCpuBackend(2);
  auto want = Generate(dir, cpu.get(), prompt, 0);
  ASSERT_TRUE(want.ok()) << want.status();
  // Whole-prompt prefill (prefill kernel), then decode (split-K kernel); and small chunks,
  // so later chunks attend to a cached prefix through the window.
  for (int chunk : {0, 37}) {
    SCOPED_TRACE(chunk);
    auto got = Generate(dir, cuda->get(), prompt, chunk);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->generated_ids, want->generated_ids);
    ASSERT_EQ(got->first_logits.size(), want->first_logits.size());
    float worst = 0;
    for (size_t i = 0; i < want->first_logits.size(); ++i) {
      worst = std::max(worst, std::abs(got->first_logits[i] - want->first_logits[i]) /
                                  (1.0f + std::abs(want->first_logits[i])));
    }
    EXPECT_LT(worst, 1e-4f);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Variants, CudaVariantsForwardTest,
    ::testing::Values(Variant{"tiny-llama3", nullptr}, Variant{"tiny-yarn", nullptr},
                      Variant{"tiny-mistral", nullptr},
                      Variant{"tiny-qwen2",
                              [](ModelConfig* c) {
                                c->sliding_window = 20;
                                c->first_window_layer = 1;
                              }}),
    [](const auto& info) {
      std::string name = info.param.preset;
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

}  // namespace
}  // namespace tessera
