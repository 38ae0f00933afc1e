// The CUDA forward pass of the Llama-family variants against the CPU backend (which
// tests/worker/reference_forward_test.cc checks against the numpy reference): llama3 and
// yarn rope scaling past the original context, Qwen2 q/k/v biases with a sliding window on
// later layers, Mistral's sliding window, Qwen3's q/k norm, the experts of Mixtral, Qwen3-MoE
// and Qwen2-MoE. Generated tiny checkpoints; skips without a device.
// Float32 activations are compared exactly; the default BF16 activations against the CPU
// emulation of BF16 (tests/worker/bf16_emulation.h): the device's error must stay within a
// small multiple of the emulation's, which a wrong bias, rotation or window would not.
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/test_model.h"
#include "tests/worker/bf16_emulation.h"
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

// The CUDA backend with TESSERA_CUDA_ACTIVATIONS=`activations` (restored afterwards).
absl::StatusOr<std::unique_ptr<kernels::Backend>> CudaWith(const char* activations) {
  ::setenv("TESSERA_CUDA_ACTIVATIONS", activations, 1);
  auto cuda = MakeBackend("cuda", 0);
  ::unsetenv("TESSERA_CUDA_ACTIVATIONS");
  return cuda;
}

// The variant's generated checkpoint and a 150-token prompt.
void MakeModel(const Variant& variant, ModelConfig* config, std::filesystem::path* dir,
               std::vector<int32_t>* prompt) {
  auto preset = PresetConfig(variant.preset);
  ASSERT_TRUE(preset.ok()) << preset.status();
  *config = *preset;
  if (variant.adjust) variant.adjust(config);
  *dir = testing::ScratchDir("model");
  GenerateOptions options;
  options.out_dir = *dir;
  options.dtype = DType::kF32;
  options.seed = 5;
  ASSERT_TRUE(GenerateRandomCheckpoint(*config, options).ok());
  prompt->resize(150);
  for (int i = 0; i < 150; ++i) (*prompt)[i] = 3 + (i * 7919 + 11) % (config->vocab_size - 3);
}

float WorstAbsolute(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  float worst = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    worst = std::max(worst, std::abs(got[i] - want[i]));
  }
  return worst;
}

// Float32 activations (TESSERA_CUDA_ACTIVATIONS=f32): the exact twin of the CPU backend.
TEST_P(CudaVariantsForwardTest, GreedyAndLogitsMatchCpu) {
  auto cuda = CudaWith("f32");
  if (!cuda.ok()) GTEST_SKIP() << "no usable CUDA device: " << cuda.status();
  ModelConfig model_config;
  std::filesystem::path dir;
  std::vector<int32_t> prompt;
  MakeModel(GetParam(), &model_config, &dir, &prompt);
  if (HasFatalFailure()) return;

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

// BF16 activations (the default): first-step logits against the float32 CPU backend, the
// device's largest error at most kEmulationFactor times the CPU emulation's (plus a floor):
// both are BF16 rounding noise of the same model, differing only in where the float sums
// round. Tokens are not compared: a random model's near-ties flip under that noise.
TEST_P(CudaVariantsForwardTest, Bf16LogitsWithinTheEmulatedError) {
  constexpr float kEmulationFactor = 3.0f;
  constexpr float kFloor = 1e-3f;
  auto cuda = CudaWith("bf16");
  if (!cuda.ok()) GTEST_SKIP() << "no usable CUDA device: " << cuda.status();
  ASSERT_EQ((*cuda)->activation_dtype(), DType::kBF16);
  ModelConfig config;
  std::filesystem::path dir;
  std::vector<int32_t> prompt;
  MakeModel(GetParam(), &config, &dir, &prompt);
  if (HasFatalFailure()) return;
  // The emulation takes the GEMM with vocab rows for the lm_head.
  const int64_t qkv_rows =
      static_cast<int64_t>(config.num_attention_heads + 2 * config.num_key_value_heads) *
      config.head_dim;
  ASSERT_NE(qkv_rows, config.vocab_size);
  ASSERT_NE(2 * config.intermediate_size, config.vocab_size);
  ASSERT_NE(config.hidden_size, config.vocab_size);

  auto cpu = kernels::MakeCpuBackend(2);
  auto want = Generate(dir, cpu.get(), prompt, 0);
  ASSERT_TRUE(want.ok()) << want.status();
  testing::Bf16RoundingBackend emulation(kernels::MakeCpuBackend(2), config.vocab_size);
  auto emulated = Generate(dir, &emulation, prompt, 0);
  ASSERT_TRUE(emulated.ok()) << emulated.status();
  const float emulated_error = WorstAbsolute(emulated->first_logits, want->first_logits);
  for (int chunk : {0, 37}) {
    SCOPED_TRACE(chunk);
    auto got = Generate(dir, cuda->get(), prompt, chunk);
    ASSERT_TRUE(got.ok()) << got.status();
    const float error = WorstAbsolute(got->first_logits, want->first_logits);
    std::printf("%s, prefill chunk %d: BF16 logits max |diff| %.4g on the device, %.4g "
                "emulated\n", GetParam().preset, chunk, error, emulated_error);
    EXPECT_LE(error, kEmulationFactor * emulated_error + kFloor);
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
                              }},
                      // Qwen3's q/k norm and the mixtures of experts: routing, the expert
                      // GEMVs (decode) and grouped GEMMs (prefill), the shared expert.
                      Variant{"tiny-qwen3", nullptr}, Variant{"tiny-mixtral", nullptr},
                      Variant{"tiny-qwen3-moe", nullptr}, Variant{"tiny-qwen2-moe", nullptr}),
    [](const auto& info) {
      std::string name = info.param.preset;
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

}  // namespace
}  // namespace tessera
