#include "common/checkpoint.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/model_config.h"
#include "common/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/test_model.h"
#include "tools/checkpoint/generate.h"

namespace tessera {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

ModelConfig Tiny() {
  auto c = PresetConfig("tiny");
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

std::filesystem::path Generate(const std::string& name, DType dtype, int shards, uint64_t seed,
                               bool lm_head = false) {
  const auto dir = testing::ScratchDir(name);
  GenerateOptions options;
  options.out_dir = dir;
  options.dtype = dtype;
  options.num_shards = shards;
  options.seed = seed;
  options.write_tied_lm_head = lm_head;
  absl::Status s = GenerateRandomCheckpoint(Tiny(), options);
  EXPECT_TRUE(s.ok()) << s;
  return dir;
}

std::unique_ptr<Checkpoint> OpenOrDie(const std::filesystem::path& dir) {
  auto ckpt = Checkpoint::Open(dir);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  return ckpt.ok() ? std::move(*ckpt) : nullptr;
}

std::vector<float> ReadF32(const Checkpoint& ckpt, const std::string& name) {
  auto info = ckpt.Info(name);
  EXPECT_TRUE(info.ok()) << info.status();
  std::vector<float> out((*info)->num_elements());
  absl::Status s = ckpt.ReadAll(name, (*info)->shape, DType::kF32, out.data());
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

TEST(CheckpointTest, EmptyFolderNamesBothFiles) {
  const auto dir = testing::ScratchDir("empty");
  auto r = Checkpoint::Open(dir);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(r.status().message()),
              AllOf(HasSubstr(dir.string()), HasSubstr("model.safetensors"),
                    HasSubstr("model.safetensors.index.json")));
}

TEST(CheckpointTest, IndexNamingMissingShard) {
  const auto dir = Generate("g", DType::kF32, 2, 1);
  std::filesystem::remove(dir / "model-00002-of-00002.safetensors");
  auto r = Checkpoint::Open(dir);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("model-00002-of-00002.safetensors"));
}

TEST(CheckpointTest, IndexTensorAbsentFromItsShard) {
  const auto dir = Generate("g", DType::kF32, 2, 1);
  auto text = ReadFileToString(dir / "model.safetensors.index.json");
  ASSERT_TRUE(text.ok());
  auto index = nlohmann::json::parse(*text);
  index["weight_map"]["model.layers.7.mlp.up_proj.weight"] = "model-00001-of-00002.safetensors";
  ASSERT_TRUE(WriteStringToFile(dir / "model.safetensors.index.json", index.dump()).ok());
  auto r = Checkpoint::Open(dir);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(r.status().message()),
              AllOf(HasSubstr("model.layers.7.mlp.up_proj.weight"),
                    HasSubstr("model-00001-of-00002.safetensors")));
}

TEST(CheckpointTest, MissingTensorIsNotFoundNamingTensorAndFolder) {
  const auto dir = Generate("g", DType::kF32, 1, 1);
  auto ckpt = OpenOrDie(dir);
  ASSERT_NE(ckpt, nullptr);
  EXPECT_FALSE(ckpt->Has("lm_head.weight"));  // Tied, and not asked for.
  EXPECT_TRUE(ckpt->Has("model.norm.weight"));
  auto info = ckpt->Info("lm_head.weight");
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(info.status().message()),
              AllOf(HasSubstr("lm_head.weight"), HasSubstr(dir.string())));
  float x;
  EXPECT_EQ(ckpt->ReadSlice("nope", {0, 1}, {0, 1}, DType::kF32, &x).code(),
            absl::StatusCode::kNotFound);
}

TEST(CheckpointTest, GeneratedFolderHasConfigTokenizerAndAllTensors) {
  const ModelConfig tiny = Tiny();
  const auto dir = Generate("g", DType::kBF16, 1, 3);
  auto config = ModelConfig::Load(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->hidden_size, 96);
  EXPECT_EQ(config->intermediate_size, 200);
  EXPECT_EQ(config->num_attention_heads, 6);
  EXPECT_EQ(config->num_key_value_heads, 2);
  EXPECT_EQ(config->head_dim, 16);
  EXPECT_EQ(config->vocab_size, 300);
  EXPECT_EQ(config->torch_dtype, DType::kBF16);

  auto tok_text = ReadFileToString(dir / "tokenizer.json");
  ASSERT_TRUE(tok_text.ok());
  auto tok = nlohmann::json::parse(*tok_text, nullptr, false);
  ASSERT_FALSE(tok.is_discarded());
  const auto& vocab = tok["model"]["vocab"];
  EXPECT_EQ(vocab.size(), 300u);
  EXPECT_EQ(vocab["<unk>"], 0);
  EXPECT_EQ(vocab["<s>"], 1);
  EXPECT_EQ(vocab["</s>"], 2);
  EXPECT_EQ(vocab["<0x00>"], 3);
  EXPECT_EQ(vocab["<0xFF>"], 258);
  EXPECT_EQ(vocab["\xE2\x96\x81"], 259);
  EXPECT_TRUE(tok["model"]["byte_fallback"].get<bool>());
  // Every merge joins two vocabulary pieces into a third.
  for (const auto& m : tok["model"]["merges"]) {
    const std::string l = m[0], r = m[1];
    EXPECT_TRUE(vocab.contains(l) && vocab.contains(r) && vocab.contains(l + r)) << l << " " << r;
  }
  EXPECT_TRUE(std::filesystem::exists(dir / "tokenizer_config.json"));

  auto ckpt = OpenOrDie(dir);
  ASSERT_NE(ckpt, nullptr);
  const int64_t h = 96;
  const std::vector<std::pair<std::string, std::vector<int64_t>>> expected = {
      {"model.embed_tokens.weight", {300, h}},
      {"model.layers.1.input_layernorm.weight", {h}},
      {"model.layers.1.self_attn.q_proj.weight", {96, h}},
      {"model.layers.1.self_attn.k_proj.weight", {32, h}},
      {"model.layers.1.self_attn.v_proj.weight", {32, h}},
      {"model.layers.1.self_attn.o_proj.weight", {h, 96}},
      {"model.layers.1.post_attention_layernorm.weight", {h}},
      {"model.layers.1.mlp.gate_proj.weight", {200, h}},
      {"model.layers.1.mlp.up_proj.weight", {200, h}},
      {"model.layers.1.mlp.down_proj.weight", {h, 200}},
      {"model.norm.weight", {h}}};
  for (const auto& [name, shape] : expected) {
    auto info = ckpt->Info(name);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ((*info)->shape, shape) << name;
    EXPECT_EQ((*info)->dtype, DType::kBF16) << name;
  }
  EXPECT_EQ(ckpt->num_files(), 1u);
}

TEST(CheckpointTest, ByteLevelTokenizerFillerPiecesAreReachableByMerges) {
  auto tok = nlohmann::json::parse(ByteLevelTokenizerJson(2000), nullptr, false);
  ASSERT_FALSE(tok.is_discarded());
  const auto& vocab = tok["model"]["vocab"];
  ASSERT_EQ(vocab.size(), 2000u);  // Unique pieces: a repeat would collapse the object.
  std::set<std::string> merged;
  for (const auto& m : tok["model"]["merges"]) {
    const std::string l = m[0], r = m[1];
    ASSERT_TRUE(vocab.contains(l) && vocab.contains(r) && vocab.contains(l + r)) << l << " " << r;
    merged.insert(l + r);
  }
  // Every multi-character filler piece can be built by some merge.
  for (const auto& [piece, id] : vocab.items()) {
    if (id.get<int>() > 259 && piece.size() > 1) {
      EXPECT_TRUE(merged.count(piece)) << piece;
    }
  }
}

TEST(CheckpointTest, GeneratedValuesHaveSensibleScale) {
  const auto dir = Generate("g", DType::kF32, 1, 5);
  auto ckpt = OpenOrDie(dir);
  ASSERT_NE(ckpt, nullptr);
  for (const auto& [name, fan_in] :
       {std::pair<std::string, int>{"model.layers.0.mlp.gate_proj.weight", 96},
        {"model.layers.0.mlp.down_proj.weight", 200}}) {
    const std::vector<float> w = ReadF32(*ckpt, name);
    double sum = 0, sq = 0;
    for (float v : w) {
      sum += v;
      sq += double{v} * v;
    }
    const double mean = sum / w.size(), std = std::sqrt(sq / w.size() - mean * mean);
    EXPECT_NEAR(mean, 0.0, 0.01) << name;
    EXPECT_NEAR(std * std::sqrt(fan_in), 1.0, 0.05) << name;
  }
  for (float v : ReadF32(*ckpt, "model.norm.weight")) EXPECT_NEAR(v, 1.0f, 0.1f);
}

TEST(CheckpointTest, TiedLmHeadCopiesEmbedding) {
  const auto dir = Generate("g", DType::kBF16, 1, 9, /*lm_head=*/true);
  auto ckpt = OpenOrDie(dir);
  ASSERT_NE(ckpt, nullptr);
  EXPECT_EQ(ReadF32(*ckpt, "lm_head.weight"), ReadF32(*ckpt, "model.embed_tokens.weight"));
}

TEST(CheckpointTest, ShardedAndSingleFileHoldTheSameValues) {
  const auto single_dir = Generate("single", DType::kBF16, 1, 42);
  const auto sharded_dir = Generate("sharded", DType::kBF16, 3, 42);
  const auto other_dir = Generate("other", DType::kBF16, 1, 43);
  EXPECT_FALSE(std::filesystem::exists(single_dir / "model.safetensors.index.json"));
  EXPECT_FALSE(std::filesystem::exists(sharded_dir / "model.safetensors"));
  for (int i = 1; i <= 3; ++i) {
    EXPECT_TRUE(std::filesystem::exists(
        sharded_dir / ("model-0000" + std::to_string(i) + "-of-00003.safetensors")));
  }
  auto single = OpenOrDie(single_dir);
  auto sharded = OpenOrDie(sharded_dir);
  auto other = OpenOrDie(other_dir);
  ASSERT_NE(single, nullptr);
  ASSERT_NE(sharded, nullptr);
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(sharded->num_files(), 3u);

  auto file = SafetensorsFile::Open(single_dir / "model.safetensors");
  ASSERT_TRUE(file.ok());
  ASSERT_EQ((*file)->tensors().size(), 1u + 2 * 9 + 1);
  for (const TensorInfo& t : (*file)->tensors()) {
    ASSERT_TRUE(sharded->Has(t.name)) << t.name;
    const std::vector<float> a = ReadF32(*single, t.name);
    EXPECT_EQ(a, ReadF32(*sharded, t.name)) << t.name;
    if (t.shape.size() == 2) {
      EXPECT_NE(a, ReadF32(*other, t.name)) << t.name;
    }
  }
}

TEST(CheckpointTest, SlicesMatchReadAllWithConversion) {
  const auto dir = Generate("g", DType::kBF16, 2, 7);
  auto ckpt = OpenOrDie(dir);
  ASSERT_NE(ckpt, nullptr);
  const std::string name = "model.layers.1.mlp.down_proj.weight";  // [96, 200]
  const int64_t rows = 96, cols = 200;
  std::vector<uint16_t> all_bf16(rows * cols);
  ASSERT_TRUE(ckpt->ReadAll(name, {rows, cols}, DType::kBF16, all_bf16.data()).ok());
  std::vector<float> all(rows * cols);
  ConvertToF32(all_bf16.data(), DType::kBF16, all.size(), all.data());

  // Row slice as F32.
  const Range r{17, 50}, c{13, 101};
  std::vector<float> row_slice(r.size() * cols);
  ASSERT_TRUE(ckpt->ReadSlice(name, r, {0, cols}, DType::kF32, row_slice.data()).ok());
  for (int64_t i = 0; i < r.size(); ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      ASSERT_EQ(row_slice[i * cols + j], all[(r.begin + i) * cols + j]);
    }
  }
  // Column slice as F16 (BF16 -> F16 goes through float).
  std::vector<uint16_t> col_slice(rows * c.size());
  ASSERT_TRUE(ckpt->ReadSlice(name, {0, rows}, c, DType::kF16, col_slice.data()).ok());
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < c.size(); ++j) {
      ASSERT_EQ(col_slice[i * c.size() + j], F32ToF16(all[i * cols + c.begin + j]));
    }
  }
  // Both ranges at once, same dtype.
  std::vector<uint16_t> block(r.size() * c.size());
  ASSERT_TRUE(ckpt->ReadSlice(name, r, c, DType::kBF16, block.data()).ok());
  for (int64_t i = 0; i < r.size(); ++i) {
    for (int64_t j = 0; j < c.size(); ++j) {
      ASSERT_EQ(block[i * c.size() + j], all_bf16[(r.begin + i) * cols + c.begin + j]);
    }
  }
  // A 1-D tensor is one row.
  const std::vector<float> norm = ReadF32(*ckpt, "model.norm.weight");
  std::vector<float> part(10);
  ASSERT_TRUE(
      ckpt->ReadSlice("model.norm.weight", {0, 1}, {40, 50}, DType::kF32, part.data()).ok());
  EXPECT_EQ(part, std::vector<float>(norm.begin() + 40, norm.begin() + 50));
}

TEST(CheckpointTest, BytesReadCountsExactlyTheSlice) {
  const auto dir = Generate("g", DType::kBF16, 1, 7);
  auto ckpt = OpenOrDie(dir);
  ASSERT_NE(ckpt, nullptr);
  const std::string name = "model.layers.0.mlp.gate_proj.weight";  // [200, 96] BF16
  EXPECT_EQ(ckpt->bytes_read(), 0u);
  std::vector<float> buf(200 * 96);
  ASSERT_TRUE(ckpt->ReadSlice(name, {50, 100}, {0, 96}, DType::kF32, buf.data()).ok());
  EXPECT_EQ(ckpt->bytes_read(), 50u * 96 * 2);
  ASSERT_TRUE(ckpt->ReadSlice(name, {0, 200}, {32, 64}, DType::kF32, buf.data()).ok());
  EXPECT_EQ(ckpt->bytes_read(), 50u * 96 * 2 + 200u * 32 * 2);
}

TEST(CheckpointTest, SliceOutOfRangeNamesTensorShapeAndRange) {
  const auto dir = Generate("g", DType::kF32, 1, 7);
  auto ckpt = OpenOrDie(dir);
  ASSERT_NE(ckpt, nullptr);
  std::vector<float> buf(200 * 96);
  const std::string name = "model.layers.0.mlp.gate_proj.weight";
  for (auto [rows, cols] : {std::pair<Range, Range>{{0, 201}, {0, 96}},
                            {{0, 10}, {90, 97}},
                            {{-1, 3}, {0, 96}},
                            {{5, 4}, {0, 96}}}) {
    absl::Status s = ckpt->ReadSlice(name, rows, cols, DType::kF32, buf.data());
    EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
    EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr(name), HasSubstr("[200, 96]"),
                                                HasSubstr("rows [" + std::to_string(rows.begin) +
                                                          ", " + std::to_string(rows.end) + ")")));
  }
  EXPECT_EQ(ckpt->bytes_read(), 0u);
  absl::Status s = ckpt->ReadAll(name, {96, 200}, DType::kF32, buf.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr("[200, 96]"), HasSubstr("[96, 200]")));
}

TEST(CheckpointTest, GeneratorRejectsBadOptions) {
  GenerateOptions options;
  options.out_dir = testing::ScratchDir("bad");
  options.num_shards = 1000;
  EXPECT_EQ(GenerateRandomCheckpoint(Tiny(), options).code(), absl::StatusCode::kInvalidArgument);
  options.num_shards = 1;
  ModelConfig small = Tiny();
  small.vocab_size = 100;
  EXPECT_EQ(GenerateRandomCheckpoint(small, options).code(), absl::StatusCode::kInvalidArgument);
  ModelConfig odd = Tiny();
  odd.num_key_value_heads = 4;  // 6 heads are not a multiple of 4.
  EXPECT_EQ(GenerateRandomCheckpoint(odd, options).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(PresetConfig("llama-7b").ok());
  auto big = PresetConfig("llama-70b-layers");
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->num_hidden_layers, 2);
  EXPECT_EQ(big->hidden_size, 8192);
  EXPECT_EQ(PresetConfig("llama3-8b", 3)->num_hidden_layers, 3);
  EXPECT_TRUE(PresetConfig("llama-1b")->tie_word_embeddings);
}

// The Qwen3 and mixture-of-experts presets: q/k norms, routers, experts and shared experts
// under each family's Hugging Face names, dense MLPs on the dense layers only, the router's
// larger scale, sharding-independent values and progress that counts every byte.
TEST(CheckpointTest, MoeAndQwen3PresetsWriteTheFamilysTensors) {
  struct Case {
    const char* preset;
    std::vector<std::pair<std::string, std::vector<int64_t>>> present;
    std::vector<std::string> absent;
  };
  const std::vector<Case> cases = {
      {"tiny-qwen3",
       {{"model.layers.2.self_attn.q_norm.weight", {32}},
        {"model.layers.2.self_attn.k_norm.weight", {32}},
        {"model.layers.2.self_attn.q_proj.weight", {128, 64}},
        {"model.layers.2.self_attn.o_proj.weight", {64, 128}},
        {"model.layers.2.mlp.gate_proj.weight", {202, 64}}},
       {"model.layers.0.mlp.gate.weight", "model.layers.0.self_attn.q_proj.bias"}},
      {"tiny-mixtral",
       {{"model.layers.2.block_sparse_moe.gate.weight", {8, 64}},
        {"model.layers.2.block_sparse_moe.experts.7.w1.weight", {40, 64}},
        {"model.layers.2.block_sparse_moe.experts.7.w3.weight", {40, 64}},
        {"model.layers.2.block_sparse_moe.experts.7.w2.weight", {64, 40}}},
       {"model.layers.0.mlp.gate_proj.weight", "model.layers.0.self_attn.q_norm.weight"}},
      {"tiny-qwen3-moe",
       {{"model.layers.0.self_attn.q_norm.weight", {16}},
        {"model.layers.0.mlp.gate.weight", {8, 64}},
        {"model.layers.3.mlp.experts.7.gate_proj.weight", {24, 64}},
        {"model.layers.3.mlp.experts.7.up_proj.weight", {24, 64}},
        {"model.layers.3.mlp.experts.7.down_proj.weight", {64, 24}},
        {"model.layers.1.mlp.gate_proj.weight", {202, 64}}},  // mlp_only_layers [1].
       {"model.layers.1.mlp.gate.weight", "model.layers.0.mlp.gate_proj.weight",
        "model.layers.0.mlp.shared_expert_gate.weight"}},
      {"tiny-qwen2-moe",
       {{"model.layers.0.self_attn.q_proj.bias", {64}},
        {"model.layers.0.mlp.gate.weight", {8, 64}},
        {"model.layers.2.mlp.experts.7.down_proj.weight", {64, 16}},
        {"model.layers.2.mlp.shared_expert.gate_proj.weight", {64, 64}},
        {"model.layers.2.mlp.shared_expert.up_proj.weight", {64, 64}},
        {"model.layers.2.mlp.shared_expert.down_proj.weight", {64, 64}},
        {"model.layers.2.mlp.shared_expert_gate.weight", {1, 64}}},
       {"model.layers.0.self_attn.o_proj.bias", "model.layers.0.self_attn.q_norm.weight",
        "model.layers.0.mlp.gate_proj.weight"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.preset);
    auto config = PresetConfig(c.preset);
    ASSERT_TRUE(config.ok()) << config.status();
    std::vector<std::filesystem::path> dirs;
    uint64_t last_done = 0, last_total = 0;
    for (int shards : {1, 3}) {
      GenerateOptions options;
      options.out_dir = testing::ScratchDir(absl::StrCat(c.preset, "-", shards));
      options.dtype = DType::kF32;
      options.num_shards = shards;
      options.seed = 11;
      options.progress = [&](uint64_t done, uint64_t total) {
        last_done = done;
        last_total = total;
      };
      ASSERT_TRUE(GenerateRandomCheckpoint(*config, options).ok());
      dirs.push_back(options.out_dir);
    }
    auto single = OpenOrDie(dirs[0]);
    auto sharded = OpenOrDie(dirs[1]);
    ASSERT_NE(single, nullptr);
    ASSERT_NE(sharded, nullptr);
    for (const auto& [name, shape] : c.present) {
      auto info = single->Info(name);
      ASSERT_TRUE(info.ok()) << info.status();
      EXPECT_EQ((*info)->shape, shape) << name;
      EXPECT_EQ(ReadF32(*single, name), ReadF32(*sharded, name)) << name;
    }
    for (const std::string& name : c.absent) EXPECT_FALSE(single->Has(name)) << name;

    auto file = SafetensorsFile::Open(dirs[0] / "model.safetensors");
    ASSERT_TRUE(file.ok());
    uint64_t bytes = 0;
    for (const TensorInfo& t : (*file)->tensors()) bytes += t.num_bytes();
    EXPECT_EQ(last_total, bytes);
    EXPECT_EQ(last_done, bytes);

    // Config round trip: the loader sees the preset's experts and q/k norm.
    auto loaded = ModelConfig::Load(dirs[0]);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->moe.num_experts, config->moe.num_experts);
    EXPECT_EQ(loaded->moe.top_k, config->moe.top_k);
    EXPECT_EQ(loaded->moe.dense_layers, config->moe.dense_layers);
    EXPECT_EQ(loaded->qk_norm, config->qk_norm);
    EXPECT_EQ(loaded->head_dim, config->head_dim);
  }
}

TEST(CheckpointTest, RouterWeightsAreScaledForSeparatedLogits) {
  auto config = PresetConfig("tiny-qwen3-moe");
  ASSERT_TRUE(config.ok());
  GenerateOptions options;
  options.out_dir = testing::ScratchDir("router");
  options.dtype = DType::kF32;
  ASSERT_TRUE(GenerateRandomCheckpoint(*config, options).ok());
  auto ckpt = OpenOrDie(options.out_dir);
  ASSERT_NE(ckpt, nullptr);
  const std::vector<float> w = ReadF32(*ckpt, "model.layers.0.mlp.gate.weight");
  double sq = 0;
  for (float v : w) sq += double{v} * v;
  // Router logits of a unit-RMS input have a standard deviation of about 4.
  EXPECT_NEAR(std::sqrt(sq / w.size()) * std::sqrt(64.0), 4.0, 0.4);
  for (float v : ReadF32(*ckpt, "model.layers.0.self_attn.k_norm.weight")) {
    EXPECT_NEAR(v, 1.0f, 0.1f);
  }
}

TEST(CheckpointTest, PresetLayerOverrideDropsDenseLayersPastTheEnd) {
  auto one = PresetConfig("tiny-qwen3-moe", 1);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_TRUE(one->moe.dense_layers.empty());
  EXPECT_TRUE(one->IsMoeLayer(0));
  auto mixtral = PresetConfig("mixtral-8x7b-layers");
  ASSERT_TRUE(mixtral.ok());
  EXPECT_EQ(mixtral->num_hidden_layers, 2);
  EXPECT_EQ(mixtral->moe.intermediate_size, 14336);
  EXPECT_EQ(PresetConfig("qwen3-235b-a22b-layers")->num_hidden_layers, 2);
  EXPECT_EQ(PresetConfig("qwen3-235b-a22b-layers", 5)->num_hidden_layers, 5);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// FP8 checkpoints store E4M3 bytes (F8_E4M3) and scalar scales (shape []): slices copy
// the bytes as they are, or decode them exactly to float.
TEST(CheckpointTest, ReadsF8E4M3SlicesAndScalarTensors) {
  const auto dir = testing::ScratchDir("f8");
  // 0x38 = 1.0, 0x40 = 2.0, 0xb8 = -1.0, 0x7e = 448, 0x01 = 2^-9, 0x00 = 0.
  const std::string bytes = {'\x38', '\x40', '\xb8', '\x7e', '\x01', '\x00'};
  const float scale = 0.5f;
  SafetensorsWriter writer;
  writer.AddBytes("w", DType::kF8E4M3, {2, 3}, bytes);
  writer.AddBytes("s", DType::kF32, {}, std::string(reinterpret_cast<const char*>(&scale), 4));
  ASSERT_TRUE(writer.Write(dir / "model.safetensors").ok());
  auto ckpt = OpenOrDie(dir);
  ASSERT_NE(ckpt, nullptr);
  auto info = ckpt->Info("w");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ((*info)->dtype, DType::kF8E4M3);
  uint8_t raw[2] = {};
  ASSERT_TRUE(ckpt->ReadSlice("w", {0, 2}, {1, 2}, DType::kF8E4M3, raw).ok());
  EXPECT_EQ(raw[0], 0x40);
  EXPECT_EQ(raw[1], 0x01);
  float values[6] = {};
  ASSERT_TRUE(ckpt->ReadAll("w", {2, 3}, DType::kF32, values).ok());
  EXPECT_EQ(std::vector<float>(values, values + 6),
            (std::vector<float>{1.0f, 2.0f, -1.0f, 448.0f, 1.0f / 512, 0.0f}));
  float s = 0;
  ASSERT_TRUE(ckpt->ReadSlice("s", {0, 1}, {0, 1}, DType::kF32, &s).ok());
  EXPECT_EQ(s, 0.5f);
}

}  // namespace
}  // namespace tessera
