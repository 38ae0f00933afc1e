// The harness of tp_one_device_cuda_test on the CPU backend, where it runs everywhere:
// tp 2 over shm and tp 4 over Gloo, every rank a CPU worker on this host, match tp 1
// token for token on stories260K (and llama2.c's reference at tp 1) and on the generated
// llama3 / qwen2 / mistral checkpoints; the BF16 comparison of the GPU test, run on these
// float32 results with the models' emulated BF16 noise, passes too.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/e2e/tp_one_device.h"

namespace tessera {
namespace {

using ::tessera::testing::TpModel;
using ::tessera::testing::UnaryResult;

class TpOneCpuDeviceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "stories260K") {
      TESSERA_REQUIRE_STORIES_MODEL();
      model_ = testing::StoriesTpModel();
    } else {
      auto model = testing::MakeTinyTpModel(GetParam(), testing::ScratchDir("model"));
      ASSERT_TRUE(model.ok()) << model.status();
      model_ = *std::move(model);
    }
  }

  static testing::TpServing Serving(int tp) {
    testing::TpServing s;
    s.worker_flags = {"--device=cpu"};
    s.communicator = tp == 4 ? "gloo" : "shm";
    s.joined_as = s.communicator;
    return s;
  }

  TpModel model_;
};

TEST_P(TpOneCpuDeviceTest, GreedyIdsOfTp2AndTp4MatchTp1) {
  const std::vector<UnaryResult> tp1 = testing::ServeGreedyAtTp(model_, 1, Serving(1));
  ASSERT_EQ(tp1.size(), model_.prompts.size());
  if (model_.name == "stories260K") {
    EXPECT_EQ(tp1[0].ids(), testing::LoadExpected().generated_ids);
  }
  auto emulated = testing::EmulatedBf16LogitError(model_);
  ASSERT_TRUE(emulated.ok()) << emulated.status();
  const float noise = testing::Bf16RunToRunNoise(*emulated);
  std::printf("%s: emulated BF16 logit error %.4g, run-to-run noise bound %.4g\n",
              model_.name.c_str(), *emulated, noise);
  for (int tp : {2, 4}) {
    SCOPED_TRACE(absl::StrCat(model_.name, " at tp ", tp));
    const std::vector<UnaryResult> tpn = testing::ServeGreedyAtTp(model_, tp, Serving(tp));
    ASSERT_EQ(tpn.size(), model_.prompts.size());
    testing::ExpectSameGreedyIds(tp1, tpn, tp);
    testing::ExpectGreedyIdsWhileDecided(tp1, tpn, tp, noise);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, TpOneCpuDeviceTest,
                         ::testing::Values("stories260K", "tiny-llama3", "tiny-qwen2",
                                           "tiny-mistral"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace tessera
