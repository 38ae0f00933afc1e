// Serving quantized weights end to end: stories260K with --quantization int8, an FP8
// checkpoint (compressed-tensors, per channel, from tests/worker/fp8_checkpoint.py) and a
// GPTQ checkpoint (tests/worker/int4_checkpoint.py), each at tp 1 and tp 2. A greedy
// "Once upon a time" must give the same ids at both tp sizes, GetModelInfo must name the
// weights' format, and the ids must follow the float model's reference continuation for
// as long as the measured quantization error allows (see kCases).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/e2e/serving_util.h"
#include "tests/support/cluster.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_model.h"
#include "tests/worker/test_expected.h"

namespace tessera {
namespace {

using ::tessera::testing::Cluster;
using ::tessera::testing::ClusterOptions;
using ::tessera::testing::GreedyText;
using ::tessera::testing::RunUnary;

constexpr int kNewTokens = 24;

// Writes a quantized copy of stories260K with one of the numpy writers.
std::filesystem::path WriteCheckpoint(const std::string& script, const std::string& args) {
  const std::filesystem::path out = testing::ScratchDir("model") / "stories260K";
  const testing::CommandResult r = testing::RunCommand(absl::StrCat(
      "python3 ", TESSERA_SOURCE_DIR, "/tests/worker/", script, " --src ",
      testing::StoriesModelDir().string(), " --out ", out.string(), " ", args, " 2>&1"));
  EXPECT_EQ(r.exit_code, 0) << script << " (needs numpy) failed:\n" << r.output;
  return out;
}

std::unique_ptr<Cluster> Start(const std::filesystem::path& model, int tp,
                               const std::vector<std::string>& flags) {
  ClusterOptions options;
  options.model_dir = model;
  options.log_dir = testing::ScratchDir(absl::StrCat("cluster-tp", tp));
  options.tp = tp;
  options.kv_memory_mb = 16;
  options.coordinator_flags = flags;
  auto cluster = Cluster::Start(std::move(options));
  if (!cluster.ok()) {
    ADD_FAILURE() << cluster.status().message();
    return nullptr;
  }
  return std::move(*cluster);
}

// Greedy ids at tp 1 and tp 2 (identical), with GetModelInfo's quantization checked.
std::vector<int32_t> ServeAtTp1And2(const std::filesystem::path& model,
                                    const std::vector<std::string>& flags,
                                    const std::string& quantization) {
  std::vector<std::vector<int32_t>> ids;
  for (int tp : {1, 2}) {
    SCOPED_TRACE(absl::StrCat("tp ", tp));
    auto cluster = Start(model, tp, flags);
    if (cluster == nullptr) return {};
    auto info = cluster->ModelInfo();
    EXPECT_TRUE(info.ok()) << info.status();
    if (info.ok()) {
      EXPECT_EQ(info->quantization(), quantization);
      EXPECT_EQ(static_cast<int>(info->tp()), tp);
    }
    const auto r = RunUnary(cluster->api(), GreedyText("Once upon a time", kNewTokens));
    EXPECT_TRUE(r.status.ok()) << r.status.error_message() << "\n" << cluster->Logs();
    EXPECT_EQ(r.ids().size(), static_cast<size_t>(kNewTokens));
    ids.push_back(r.ids());
  }
  // Column-parallel shards stack whole rows with their own scales and row-parallel shards
  // keep every row's scale, so the sharded weights are bit-identical to tp 1's; only the
  // order of the all-reduced float sums differs, which must not flip a greedy choice here.
  EXPECT_EQ(ids[0], ids[1]) << "tp 1: " << absl::StrJoin(ids[0], " ")
                            << "\ntp 2: " << absl::StrJoin(ids[1], " ");
  return ids[0];
}

// How many leading ids agree with llama2.c's float continuation.
int ReferencePrefix(const std::vector<int32_t>& ids) {
  const std::vector<int32_t> reference = testing::LoadExpected().generated_ids;
  int n = 0;
  while (n < static_cast<int>(std::min(ids.size(), reference.size())) && ids[n] == reference[n]) ++n;
  std::printf("%s: %d of %zu ids agree with the float reference\n",
              ::testing::UnitTest::GetInstance()->current_test_info()->name(), n, ids.size());
  return n;
}

// Bounds set below what `tessera run` measured at tp 1 over the reference's 60 tokens:
// int8 (per-row, 8-bit) 60 of 60; compressed-tensors FP8 per channel 23 (FP8 keeps 3
// mantissa bits, and stories260K's 64-wide layers make near-ties common: the 24th token
// flips); GPTQ 4-bit g32 16. Past the first flip a greedy text legitimately diverges, so
// the bound is the prefix, with a margin of a few tokens for float-order differences.
TEST(QuantizedServingTest, Int8AtTp1And2) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const auto ids = ServeAtTp1And2(testing::StoriesModelDir(), {"--quantization=int8"}, "int8");
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ReferencePrefix(ids), kNewTokens) << absl::StrJoin(ids, " ");
}

TEST(QuantizedServingTest, Fp8CheckpointAtTp1And2) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const auto model =
      WriteCheckpoint("fp8_checkpoint.py", "--format compressed-tensors --strategy channel");
  const auto ids = ServeAtTp1And2(model, {}, "fp8");
  ASSERT_FALSE(ids.empty());
  EXPECT_GE(ReferencePrefix(ids), 16) << absl::StrJoin(ids, " ");
}

TEST(QuantizedServingTest, GptqCheckpointAtTp1And2) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const auto model = WriteCheckpoint("int4_checkpoint.py", "--method gptq --group-size 32");
  const auto ids = ServeAtTp1And2(model, {}, "gptq");
  ASSERT_FALSE(ids.empty());
  EXPECT_GE(ReferencePrefix(ids), 12) << absl::StrJoin(ids, " ");
}

// --quantization on a checkpoint that is already quantized stops the coordinator before
// any worker loads, naming both.
TEST(QuantizedServingTest, LoadTimeQuantizationOfAnFp8CheckpointIsRefused) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const auto model = WriteCheckpoint("fp8_checkpoint.py", "--format fp8");
  ClusterOptions options;
  options.model_dir = model;
  options.log_dir = testing::ScratchDir("refused");
  options.coordinator_flags = {"--quantization=int8"};
  options.ready_timeout = std::chrono::seconds(20);
  auto cluster = Cluster::Start(std::move(options));
  ASSERT_FALSE(cluster.ok());
  EXPECT_NE(cluster.status().message().find("is already quantized (fp8"), std::string::npos)
      << cluster.status().message();
  EXPECT_NE(cluster.status().message().find("--quantization int8"), std::string::npos)
      << cluster.status().message();
}

}  // namespace
}  // namespace tessera
