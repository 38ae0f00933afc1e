// GPTQ and AWQ 4-bit checkpoints (written by tests/worker/int4_checkpoint.py, a numpy packer)
// through the CUDA forward pass against the CPU backend on the float32 weights they stand
// for (--dequant-out): the loader puts kU4 matrices in device memory, decode and small
// prefill chunks take the fused int4 GEMV, a whole-prompt prefill the BF16 widening +
// cuBLASLt path. Needs a device and numpy; skips without a device.
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "gtest/gtest.h"
#include "tests/support/subprocess.h"
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
  auto cache = (*model)->CreateKvCache(8, 16);
  if (!cache.ok()) return cache.status();
  SingleSequenceOptions o;
  o.max_new_tokens = 16;
  o.sampling.temperature = 0;
  o.ignore_eos = true;
  o.prefill_chunk = chunk;
  return GenerateSingleSequence(**model, **cache, prompt, o);
}

// Largest |got - want| / (1 + |want|) over the logits.
float WorstRelative(const std::vector<float>& got, const std::vector<float>& want) {
  float worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(got[i] - want[i]) / (1.0f + std::abs(want[i])));
  }
  return worst;
}

// Float32 activations (TESSERA_CUDA_ACTIVATIONS=f32): the exact twin of the CPU backend.
// What the default BF16 activations promise is checked in cuda_forward_test.
TEST(CudaInt4ForwardTest, GptqAndAwqMatchCpu) {
  ::setenv("TESSERA_CUDA_ACTIVATIONS", "f32", 1);
  auto cuda = MakeBackend("cuda", 0);
  ::unsetenv("TESSERA_CUDA_ACTIVATIONS");
  if (!cuda.ok()) GTEST_SKIP() << "no usable CUDA device: " << cuda.status();
  // Every linear layer packs: both dims divide by 8 and by the group (32 and 128 below).
  ModelConfig c;
  c.hidden_size = 128;
  c.intermediate_size = 256;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 32;
  c.num_hidden_layers = 2;
  c.vocab_size = 320;
  c.max_position_embeddings = 128;
  c.eos_token_ids = {2};
  const auto src = testing::ScratchDir("float");
  GenerateOptions options;
  options.out_dir = src;
  options.dtype = DType::kF32;
  options.seed = 17;
  ASSERT_TRUE(GenerateRandomCheckpoint(c, options).ok());
  std::vector<int32_t> prompt(40);
  for (int i = 0; i < 40; ++i) prompt[i] = 3 + (i * 7919 + 11) % (c.vocab_size - 3);

  for (const auto& [method, group] : {std::pair<std::string, int>{"gptq", 32}, {"awq", 128}}) {
    SCOPED_TRACE(absl::StrCat(method, " group ", group));
    const auto out = testing::ScratchDir(absl::StrCat(method, group));
    const auto dequantized = testing::ScratchDir(absl::StrCat(method, group, "_dequantized"));
    const testing::CommandResult written = testing::RunCommand(absl::StrCat(
        "python3 ", TESSERA_SOURCE_DIR, "/tests/worker/int4_checkpoint.py --src ", src.string(),
        " --out ", out.string(), " --dequant-out ", dequantized.string(), " --method ", method,
        " --group-size ", group, " 2>&1"));
    ASSERT_EQ(written.exit_code, 0) << "int4_checkpoint.py (needs numpy):\n" << written.output;
    auto checkpoint = Checkpoint::Open(out);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    ASSERT_TRUE((*checkpoint)->Has("model.layers.0.mlp.down_proj.qweight"));

    // The reference: the CPU backend on the float32 weights s * (q - z) the 4-bit ones
    // stand for. (On the 4-bit checkpoint itself it rounds activations to int16 per 32
    // columns for its integer kernels, about 1e-4 of a logit away from float32.) Chunks of
    // 4 tokens keep every CUDA GEMM on the fused int4 GEMV, float32 throughout.
    auto cpu = kernels::MakeCpuBackend(2);
    auto want = Generate(dequantized, cpu.get(), prompt, 4);
    ASSERT_TRUE(want.ok()) << want.status();
    auto got = Generate(out, cuda->get(), prompt, 4);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->generated_ids, want->generated_ids);
    ASSERT_EQ(got->first_logits.size(), want->first_logits.size());
    EXPECT_LT(WorstRelative(got->first_logits, want->first_logits), 1e-4f);

    // The whole prompt at once: m = 40 widens the weights to BF16 and rounds the
    // activations to BF16 for cuBLASLt, ~0.3 % per layer (see kernels_cuda_test), so only
    // the logits are compared, at a bound that still catches a wrong group or zero.
    auto whole = Generate(out, cuda->get(), prompt, 0);
    ASSERT_TRUE(whole.ok()) << whole.status();
    ASSERT_EQ(whole->first_logits.size(), want->first_logits.size());
    EXPECT_LT(WorstRelative(whole->first_logits, want->first_logits), 5e-2f);
  }
}

}  // namespace
}  // namespace tessera
