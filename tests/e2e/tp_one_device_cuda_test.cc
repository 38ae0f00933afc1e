// tp 2 and tp 4 with every rank on CUDA device 0 (--device=cuda:0) against tp 1: NCCL
// refuses two ranks on one device, so the groups reduce through host-staged shm (tp 2)
// and Gloo (tp 4). Float32 activations must match tp 1 token for token (and stories260K
// llama2.c's reference). BF16 activations must match wherever tp 1 decided by more than
// two BF16 runs can move a logit gap, with first-step logprobs within that noise (both
// from the model's emulated BF16 error, as cuda_variants_forward_test bounds the
// device's), and stories260K's first 16 tokens must be the reference's (as
// cuda_tensor_parallel_forward_test). Skips only where no CUDA device is usable: on a GPU
// a missing model or a cluster that does not start fails.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/e2e/tp_one_device.h"
#include "worker/backend_factory.h"

namespace tessera {
namespace {

using ::tessera::testing::TpModel;
using ::tessera::testing::UnaryResult;

// stories260K's first 16 tokens are decided by top-2 gaps of at least 0.5, which BF16
// noise (logits within 0.21 of float32) cannot flip (cuda_bf16_emulation_test).
constexpr int kBf16GreedyPrefix = 16;

struct Case {
  std::string model;        // "stories260K" or a generated preset.
  std::string activations;  // TESSERA_CUDA_ACTIVATIONS.
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.model << ", " << c.activations; }

class TpOneCudaDeviceTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (auto cuda = MakeBackend("cuda:0", 0); !cuda.ok()) {
      GTEST_SKIP() << "no usable CUDA device: " << cuda.status();
    }
    if (GetParam().model == "stories260K") {
      ASSERT_TRUE(testing::HaveStoriesModel())
          << "stories260K not found at " << testing::StoriesModelDir().string()
          << " (set TESSERA_STORIES_DIR); on a GPU this test must run";
      model_ = testing::StoriesTpModel();
    } else {
      auto model = testing::MakeTinyTpModel(GetParam().model, testing::ScratchDir("model"));
      ASSERT_TRUE(model.ok()) << model.status();
      model_ = *std::move(model);
    }
  }

  testing::TpServing Serving(int tp) const {
    testing::TpServing s;
    s.worker_flags = {"--device=cuda:0"};
    s.worker_env = {absl::StrCat("TESSERA_CUDA_ACTIVATIONS=", GetParam().activations)};
    s.communicator = tp == 4 ? "gloo" : "shm";
    s.joined_as = absl::StrCat(s.communicator, "+host-staged");
    return s;
  }

  TpModel model_;
};

TEST_P(TpOneCudaDeviceTest, GreedyIdsOfTp2AndTp4OnOneDeviceMatchTp1) {
  const bool f32 = GetParam().activations == "f32";
  const std::vector<UnaryResult> tp1 = testing::ServeGreedyAtTp(model_, 1, Serving(1));
  ASSERT_EQ(tp1.size(), model_.prompts.size());
  const bool stories = model_.name == "stories260K";
  const std::vector<int32_t> reference =
      stories ? testing::LoadExpected().generated_ids : std::vector<int32_t>{};
  const auto prefix = [](const std::vector<int32_t>& ids) {
    return std::vector<int32_t>(ids.begin(),
                                ids.begin() + std::min<size_t>(ids.size(), kBf16GreedyPrefix));
  };
  if (stories) {
    EXPECT_EQ(f32 ? tp1[0].ids() : prefix(tp1[0].ids()), f32 ? reference : prefix(reference));
  }
  float noise = 0;
  if (!f32) {
    auto emulated = testing::EmulatedBf16LogitError(model_);
    ASSERT_TRUE(emulated.ok()) << emulated.status();
    noise = testing::Bf16RunToRunNoise(*emulated);
    std::printf("%s: emulated BF16 logit error %.4g, run-to-run noise bound %.4g\n",
                model_.name.c_str(), *emulated, noise);
  }
  for (int tp : {2, 4}) {
    SCOPED_TRACE(
        absl::StrCat(model_.name, " at tp ", tp, ", ", GetParam().activations, " activations"));
    const std::vector<UnaryResult> tpn = testing::ServeGreedyAtTp(model_, tp, Serving(tp));
    ASSERT_EQ(tpn.size(), model_.prompts.size());
    if (f32) {
      testing::ExpectSameGreedyIds(tp1, tpn, tp);
      continue;
    }
    testing::ExpectGreedyIdsWhileDecided(tp1, tpn, tp, noise);
    if (stories) {
      EXPECT_EQ(prefix(tpn[0].ids()), prefix(reference));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, TpOneCudaDeviceTest,
                         ::testing::Values(Case{"stories260K", "f32"}, Case{"tiny-llama3", "f32"},
                                           Case{"tiny-qwen2", "f32"}, Case{"tiny-mistral", "f32"},
                                           Case{"stories260K", "bf16"}, Case{"tiny-llama3", "bf16"},
                                           Case{"tiny-qwen2", "bf16"},
                                           Case{"tiny-mistral", "bf16"}),
                         [](const auto& info) {
                           std::string name =
                               absl::StrCat(info.param.model, "_", info.param.activations);
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace tessera
