// Quality of the AVX512-BF16 path at the model level. With BF16 weights that path rounds
// every matmul's activations to BF16 (as llama.cpp and torch's bf16 matmuls do): a speed-up
// only counts if the model still predicts what it predicted before. stories260K (a trained
// model) converted to BF16 is run teacher-forced over its reference continuation on the
// float-activation path (kAvx512) and the BF16 one, and the next-token choices compared.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include "common/safetensors.h"
#include "gtest/gtest.h"
#include "kernels/cpu/simd.h"
#include "tests/support/test_model.h"
#include "tests/worker/teacher_forcing.h"
#include "worker/communicator.h"
#include "worker/llama_model.h"

namespace tessera {
namespace {

// Copies the stories260K folder with every tensor stored as BF16.
std::filesystem::path WriteBf16Copy(const std::filesystem::path& dir) {
  const std::filesystem::path src = testing::StoriesModelDir();
  for (const auto& entry : std::filesystem::directory_iterator(src)) {
    if (entry.path().extension() == ".json") {
      std::filesystem::copy_file(entry.path(), dir / entry.path().filename());
    }
  }
  auto file = SafetensorsFile::Open(src / "model.safetensors");
  EXPECT_TRUE(file.ok()) << file.status();
  SafetensorsWriter writer;
  for (const TensorInfo& t : (*file)->tensors()) {
    EXPECT_EQ(t.dtype, DType::kF32) << t.name;
    const auto* values = reinterpret_cast<const float*>((*file)->Data(t));
    writer.Add(t.name, DType::kBF16, t.shape, [values](uint64_t offset, uint64_t n, void* dst) {
      ConvertFromF32(values + offset, n, DType::kBF16, dst);
    });
  }
  const absl::Status written = writer.Write(dir / "model.safetensors");
  EXPECT_TRUE(written.ok()) << written;
  return dir;
}

using testing::TeacherForcedLogits;

TEST(Bf16ActivationQualityTest, Stories260kKeepsItsNextTokenChoices) {
  TESSERA_REQUIRE_STORIES_MODEL();
  if (kernels::DetectSimdLevel() < kernels::SimdLevel::kAvx512Bf16) {
    GTEST_SKIP() << "no AVX512-BF16 on this CPU: the path under test cannot run";
  }
  const std::filesystem::path dir = WriteBf16Copy(testing::ScratchDir("bf16"));
  const std::vector<int32_t> tokens = testing::ReferenceTokens();

  auto backend = kernels::MakeCpuBackend(2);
  SingleRankCommunicator comm;
  auto model = LlamaModel::Load(dir, backend.get(), &comm);
  ASSERT_TRUE(model.ok()) << model.status();
  kernels::SetSimdLevelOverride(kernels::SimdLevel::kAvx512);
  const std::vector<float> f32 = TeacherForcedLogits(**model, tokens);
  kernels::SetSimdLevelOverride(kernels::SimdLevel::kAvx512Bf16);
  const std::vector<float> bf16 = TeacherForcedLogits(**model, tokens);
  kernels::ClearSimdLevelOverride();
  ASSERT_EQ(f32.size(), bf16.size());

  const size_t vocab = (*model)->config().vocab_size;
  const size_t rows = f32.size() / vocab;
  int agree = 0;
  double worst = 0.0, sum_abs = 0.0;
  for (size_t r = 0; r < rows; ++r) {
    const float* a = &f32[r * vocab];
    const float* b = &bf16[r * vocab];
    agree += std::max_element(a, a + vocab) - a == std::max_element(b, b + vocab) - b;
    for (size_t v = 0; v < vocab; ++v) {
      worst = std::max(worst, static_cast<double>(std::fabs(a[v] - b[v])));
      sum_abs += std::fabs(a[v] - b[v]);
    }
  }
  const double agreement = static_cast<double>(agree) / rows;
  std::printf("BF16 activations vs float, stories260K BF16, %zu positions: top-1 agreement %.4f, "
              "logit |diff| mean %.4g, max %.4g\n",
              rows, agreement, sum_abs / f32.size(), worst);
  // The quality bar of the quantization gate for 8-bit formats.
  EXPECT_GE(agreement, 0.99);
  // Logits of this model span about +-15: rounding activations moves them by hundredths.
  EXPECT_LT(worst, 0.5);
}

}  // namespace
}  // namespace tessera
