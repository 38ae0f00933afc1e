// GPTQ and AWQ 4-bit checkpoints of stories260K (and of a generated model whose MLP can be
// packed too) written by tests/worker/int4_checkpoint.py, a numpy packer independent of the
// C++ reader. The forward pass on the 4-bit files must equal the one on the float
// checkpoint they stand for (same weights, dequantized by numpy), at tp 1 and 2, and keep
// the original model's next-token choices.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/subprocess.h"
#include "tests/support/test_model.h"
#include "tests/worker/checkpoint_forward.h"
#include "tests/worker/test_expected.h"
#include "tools/checkpoint/generate.h"
#include "worker/comm/local_communicator.h"
#include "worker/communicator.h"
#include "worker/gptq_checkpoint.h"
#include "worker/llama_model.h"
#include "worker/single_sequence.h"

namespace tessera {
namespace {

struct Int4Dirs {
  std::filesystem::path quantized;
  std::filesystem::path dequantized;
};

// Runs the numpy writer; fails the test when it cannot.
bool WriteInt4(const std::filesystem::path& src, const std::string& method, int group,
               const std::string& format, Int4Dirs* dirs) {
  const std::filesystem::path root =
      testing::ScratchDir(absl::StrCat(method, format, "g", group));
  dirs->quantized = root / "int4";
  dirs->dequantized = root / "float";
  const std::string command = absl::StrCat(
      "python3 ", TESSERA_SOURCE_DIR, "/tests/worker/int4_checkpoint.py --src ", src.string(),
      " --out ", dirs->quantized.string(), " --dequant-out ", dirs->dequantized.string(),
      " --method ", method, " --group-size ", group, " --checkpoint-format ", format, " 2>&1");
  const testing::CommandResult result = testing::RunCommand(command);
  if (result.exit_code != 0) {
    ADD_FAILURE() << "int4_checkpoint.py failed (exit " << result.exit_code
                  << "; it needs numpy, see requirements-dev.txt):\n" << result.output;
    return false;
  }
  return true;
}

std::vector<int32_t> ReferenceTokens() {
  const testing::Expected expected = testing::LoadExpected();
  std::vector<int32_t> tokens = expected.prompt_ids;
  tokens.insert(tokens.end(), expected.generated_ids.begin(), expected.generated_ids.end());
  return tokens;
}


constexpr double kTwinBound = 2e-3;

// The 4-bit checkpoint against its dequantized twin at tp 1 and 2; returns the tp-1 logits.
std::vector<float> ExpectSameAsDequantized(const Int4Dirs& dirs,
                                           const std::vector<int32_t>& tokens) {
  absl::Status status;
  const std::vector<float> reference =
      testing::TeacherForcedAtTp(dirs.dequantized, 1, tokens, &status);
  EXPECT_TRUE(status.ok()) << status;
  std::vector<float> tp1;
  for (int world : {1, 2}) {
    const std::vector<float> got =
        testing::TeacherForcedAtTp(dirs.quantized, world, tokens, &status);
    EXPECT_TRUE(status.ok()) << "tp " << world << ": " << status;
    EXPECT_EQ(got.size(), reference.size());
    if (got.size() != reference.size()) return {};
    // Same weights (s (q - z), exact in float); the CPU kernel rounds each 32-column group
    // of activations to int16 (at most 2^-16 of the group's largest value), which five
    // layers turn into a few 1e-4 of the logits; a wrong nibble or group is far larger.
    EXPECT_LT(testing::WorstRelativeDiff(got, reference), kTwinBound) << "tp " << world;
    if (world == 1) tp1 = got;
  }
  const std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + 4);
  auto int4 = testing::GreedyDecode(dirs.quantized, prompt, 24);
  auto dequantized = testing::GreedyDecode(dirs.dequantized, prompt, 24);
  EXPECT_TRUE(int4.ok()) << int4.status();
  EXPECT_TRUE(dequantized.ok()) << dequantized.status();
  if (int4.ok() && dequantized.ok()) {
    EXPECT_EQ(int4->generated_ids, dequantized->generated_ids);
    EXPECT_LT(testing::WorstRelativeDiff(int4->first_logits, dequantized->first_logits), kTwinBound);
  }
  return tp1;
}

void ExpectStoriesQuality(const std::string& method, const std::string& format) {
  Int4Dirs dirs;
  ASSERT_TRUE(WriteInt4(testing::StoriesModelDir(), method, 32, format, &dirs));
  const std::vector<int32_t> tokens = ReferenceTokens();
  const std::vector<float> int4 = ExpectSameAsDequantized(dirs, tokens);
  ASSERT_FALSE(int4.empty());
  absl::Status status;
  const std::vector<float> original =
      testing::TeacherForcedAtTp(testing::StoriesModelDir(), 1, tokens, &status);
  ASSERT_TRUE(status.ok()) << status;
  const double agreement = testing::TopOneAgreement(int4, original, 512);
  std::printf("%s %s g32 (attention projections 4-bit) vs float stories260K, %zu positions: "
              "top-1 agreement %.4f\n",
              method.c_str(), format.c_str(), tokens.size(), agreement);
  EXPECT_GE(agreement, 0.95);
}

TEST(Int4CheckpointTest, GptqStories260K) {
  TESSERA_REQUIRE_STORIES_MODEL();
  ExpectStoriesQuality("gptq", "gptq");
}

TEST(Int4CheckpointTest, AwqStories260K) {
  TESSERA_REQUIRE_STORIES_MODEL();
  ExpectStoriesQuality("awq", "gptq");
}

TEST(Int4CheckpointTest, ReadsOnlyTheLayersOwnTensors) {
  TESSERA_REQUIRE_STORIES_MODEL();
  Int4Dirs dirs;
  ASSERT_TRUE(WriteInt4(testing::StoriesModelDir(), "gptq", 32, "gptq", &dirs));
  auto checkpoint = Checkpoint::Open(dirs.quantized);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  auto config = LoadInt4QuantConfig(dirs.quantized);
  ASSERT_TRUE(config.ok() && config->has_value()) << config.status();
  const std::string prefix = "model.layers.3.self_attn.o_proj";
  // Rank 1 of 2: output rows all, input columns [32, 64).
  auto m = ReadInt4Linear(**checkpoint, **config, prefix, 64, 64, {0, 64}, {32, 64});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->group_size, 32);
  uint64_t own = 0;
  for (const char* t : {".qweight", ".qzeros", ".scales", ".g_idx"}) {
    auto info = (*checkpoint)->Info(prefix + t);
    ASSERT_TRUE(info.ok());
    own += (*info)->num_bytes();
  }
  EXPECT_EQ((*checkpoint)->bytes_read(), own);
}

// stories260K's intermediate size (172) cannot be packed; a generated model with an
// intermediate of 128 puts gate/up/down through the 4-bit path too.
TEST(Int4CheckpointTest, GeneratedModelWithQuantizedMlp) {
  ModelConfig c;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.num_hidden_layers = 2;
  c.vocab_size = 320;
  c.max_position_embeddings = 128;
  c.eos_token_ids = {2};
  const auto src = testing::ScratchDir("float");
  GenerateOptions options;
  options.out_dir = src;
  options.dtype = DType::kF32;
  options.seed = 11;
  const absl::Status generated = GenerateRandomCheckpoint(c, options);
  ASSERT_TRUE(generated.ok()) << generated;
  const std::vector<int32_t> tokens{1, 5, 9, 13, 40, 41, 42, 60, 70, 80, 90, 3, 4, 5, 6, 7, 8};
  for (const auto& [method, format] : {std::pair<std::string, std::string>{"gptq", "gptq_v2"},
                                       {"awq", "gptq"}}) {
    SCOPED_TRACE(method + " " + format);
    Int4Dirs dirs;
    ASSERT_TRUE(WriteInt4(src, method, 32, format, &dirs));
    auto checkpoint = Checkpoint::Open(dirs.quantized);
    ASSERT_TRUE(checkpoint.ok());
    ASSERT_TRUE((*checkpoint)->Has("model.layers.0.mlp.down_proj.qweight"));
    ExpectSameAsDequantized(dirs, tokens);
  }
}

// A mixture of experts (tiny Qwen3-MoE with experts of 32) quantized by GPTQ and AWQ: every
// expert's gate/up/down goes through the 4-bit path, per expert, and matches its dequantized
// twin at tp 1 and 2 (each expert's 32 columns split into one group of 16 per rank).
TEST(Int4CheckpointTest, MixtureOfExpertsWithQuantizedExperts) {
  auto c = PresetConfig("tiny-qwen3-moe");
  ASSERT_TRUE(c.ok()) << c.status();
  c->moe.intermediate_size = 32;
  const auto src = testing::ScratchDir("moe-float");
  GenerateOptions options;
  options.out_dir = src;
  options.dtype = DType::kF32;
  options.seed = 12;
  const absl::Status generated = GenerateRandomCheckpoint(*c, options);
  ASSERT_TRUE(generated.ok()) << generated;
  const std::vector<int32_t> tokens{1, 5, 9, 13, 40, 41, 42, 60, 70, 80, 90, 3, 4, 5, 6, 7, 8};
  for (const auto& [method, format] : {std::pair<std::string, std::string>{"gptq", "gptq"},
                                       {"awq", "gptq"}}) {
    SCOPED_TRACE(method + " " + format);
    Int4Dirs dirs;
    ASSERT_TRUE(WriteInt4(src, method, 16, format, &dirs));
    auto checkpoint = Checkpoint::Open(dirs.quantized);
    ASSERT_TRUE(checkpoint.ok());
    ASSERT_TRUE((*checkpoint)->Has("model.layers.0.mlp.experts.7.down_proj.qweight"));
    ExpectSameAsDequantized(dirs, tokens);
  }
}

// Rewrites quantization_config fields of `dir`/config.json.
void EditQuantConfig(const std::filesystem::path& dir, const nlohmann::json& patch) {
  auto text = ReadFileToString(dir / "config.json");
  ASSERT_TRUE(text.ok());
  nlohmann::json j = nlohmann::json::parse(*text);
  for (auto it = patch.begin(); it != patch.end(); ++it) j["quantization_config"][it.key()] = *it;
  std::ofstream(dir / "config.json") << j.dump(2);
}

absl::Status LoadStatus(const std::filesystem::path& dir, int world) {
  absl::Status status;
  testing::TeacherForcedAtTp(dir, world, {1, 2, 3}, &status);
  return status;
}

TEST(Int4CheckpointTest, MalformedCheckpointsFailClearly) {
  TESSERA_REQUIRE_STORIES_MODEL();
  {
    // Groups of 64 over o_proj's 64 inputs cannot be split over two ranks.
    Int4Dirs dirs;
    ASSERT_TRUE(WriteInt4(testing::StoriesModelDir(), "gptq", 64, "gptq", &dirs));
    EXPECT_TRUE(LoadStatus(dirs.quantized, 1).ok());
    const absl::Status s = LoadStatus(dirs.quantized, 2);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("split a quantization group of 64"), std::string::npos) << s;
  }
  Int4Dirs dirs;
  ASSERT_TRUE(WriteInt4(testing::StoriesModelDir(), "gptq", 32, "gptq", &dirs));
  struct Case {
    nlohmann::json patch;
    const char* message;
  };
  const Case cases[] = {
      {{{"bits", 8}}, "bits 8"},
      // GPTQ tensors read as AWQ: qweight is [in / 8, out], AWQ wants [in, out / 8].
      {{{"quant_method", "awq"}, {"bits", 4}, {"version", "gemm"}, {"zero_point", true}},
       "qweight has shape"},
      // Groups of 16 want qzeros [4, out / 8]; the file has [2, out / 8].
      {{{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 16}}, "qzeros has shape"},
  };
  for (const Case& c : cases) {
    EditQuantConfig(dirs.quantized, c.patch);
    const absl::Status s = LoadStatus(dirs.quantized, 1);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.patch.dump() << ": " << s;
    EXPECT_NE(s.message().find(c.message), std::string::npos) << c.patch.dump() << ": " << s;
  }
}

}  // namespace
}  // namespace tessera
