// The llama2.c converter on synthetic checkpoints (both formats) and corrupt inputs.
#include "tools/checkpoint/llama2c.h"

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/checkpoint.h"
#include "common/file_util.h"
#include "common/model_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/test_model.h"

namespace tessera {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// A small model: 2 query heads of 4 dims sharing 1 KV head.
constexpr int kDim = 8, kHidden = 12, kLayers = 2, kHeads = 2, kKvHeads = 1, kVocab = 262,
              kSeqLen = 16;
constexpr int kHeadDim = kDim / kHeads, kKvDim = kHeadDim * kKvHeads;

// One fp32 array of the llama2.c layout, filled with distinct values.
struct Array {
  std::string name;
  int layers;  // 1 for arrays without a layer axis.
  int rows;
  int cols;
  std::vector<float> values = {};
};

std::vector<Array> MakeArrays(bool with_freq_cis, bool with_classifier) {
  std::vector<Array> arrays = {{"tok_embeddings", 1, kVocab, kDim},
                               {"rms_att", kLayers, 1, kDim},
                               {"wq", kLayers, kDim, kDim},
                               {"wk", kLayers, kKvDim, kDim},
                               {"wv", kLayers, kKvDim, kDim},
                               {"wo", kLayers, kDim, kDim},
                               {"rms_ffn", kLayers, 1, kDim},
                               {"w1", kLayers, kHidden, kDim},
                               {"w2", kLayers, kDim, kHidden},
                               {"w3", kLayers, kHidden, kDim},
                               {"rms_final", 1, 1, kDim}};
  if (with_freq_cis) {
    arrays.push_back({"freq_cis_real", 1, kSeqLen, kHeadDim / 2});
    arrays.push_back({"freq_cis_imag", 1, kSeqLen, kHeadDim / 2});
  }
  if (with_classifier) arrays.push_back({"wcls", 1, kVocab, kDim});
  float next = 0.001f;
  for (Array& a : arrays) {
    a.values.resize(static_cast<size_t>(a.layers) * a.rows * a.cols);
    for (float& v : a.values) {
      v = next;
      next += 0.001f;
    }
  }
  return arrays;
}

const Array& Get(const std::vector<Array>& arrays, const std::string& name) {
  for (const Array& a : arrays) {
    if (a.name == name) return a;
  }
  ADD_FAILURE() << "no array " << name;
  return arrays[0];
}

void Append(std::string* out, const void* p, size_t n) {
  out->append(static_cast<const char*>(p), n);
}
void AppendI32(std::string* out, int32_t v) { Append(out, &v, 4); }
void AppendArray(std::string* out, const Array& a) {
  Append(out, a.values.data(), a.values.size() * 4);
}

std::string V0File(const std::vector<Array>& arrays, bool shared) {
  std::string out;
  for (int v : {kDim, kHidden, kLayers, kHeads, kKvHeads, shared ? kVocab : -kVocab, kSeqLen}) {
    AppendI32(&out, v);
  }
  for (const Array& a : arrays) AppendArray(&out, a);  // Already in v0 order.
  return out;
}

std::string V1File(const std::vector<Array>& arrays, bool shared, int version = 1) {
  std::string out;
  const uint32_t magic = 0x616b3432;
  Append(&out, &magic, 4);
  AppendI32(&out, version);
  for (int v : {kDim, kHidden, kLayers, kHeads, kKvHeads, kVocab, kSeqLen}) AppendI32(&out, v);
  out.push_back(shared ? 1 : 0);
  out.resize(256, '\0');
  for (const char* name : {"rms_att", "rms_ffn", "rms_final", "tok_embeddings", "wq", "wk", "wv",
                           "wo", "w1", "w2", "w3"}) {
    AppendArray(&out, Get(arrays, name));
  }
  if (!shared) AppendArray(&out, Get(arrays, "wcls"));
  return out;
}

// tokenizer.bin: <unk>, <s>, </s>, the byte pieces, then " ", "a", " a".
std::string TokenizerFile(int vocab = kVocab) {
  std::vector<std::pair<std::string, float>> tokens = {
      {"<unk>", 0}, {"\n<s>\n", 0}, {"\n</s>\n", 0}};
  for (int b = 0; b < 256; ++b) tokens.push_back({absl::StrFormat("<0x%02X>", b), 0});
  tokens.push_back({" a", 0});
  tokens.push_back({" ", -1});
  tokens.push_back({"a", -2});
  std::string out;
  AppendI32(&out, 2);
  for (int i = 0; i < vocab; ++i) {
    Append(&out, &tokens[i].second, 4);
    AppendI32(&out, static_cast<int32_t>(tokens[i].first.size()));
    out += tokens[i].first;
  }
  return out;
}

std::filesystem::path WriteFile(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::vector<float> Read(const Checkpoint& ckpt, const std::string& name,
                        const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> out(n);
  absl::Status s = ckpt.ReadAll(name, shape, DType::kF32, out.data());
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

// Rows [layer * rows, (layer + 1) * rows) of a stacked array.
std::vector<float> Layer(const Array& a, int layer) {
  const size_t n = static_cast<size_t>(a.rows) * a.cols;
  return std::vector<float>(a.values.begin() + layer * n, a.values.begin() + (layer + 1) * n);
}

// HF q/k rows from llama2.c rows: W.reshape(heads, hd/2, 2, in).transpose(0, 2, 1, 3).
std::vector<float> Permuted(const std::vector<float>& w, int heads, int cols) {
  const int hd = static_cast<int>(w.size()) / cols / heads;
  std::vector<float> out(w.size());
  for (int h = 0; h < heads; ++h) {
    for (int j = 0; j < hd / 2; ++j) {
      for (int half = 0; half < 2; ++half) {
        const int old_row = h * hd + 2 * j + half, new_row = h * hd + half * (hd / 2) + j;
        std::memcpy(&out[new_row * cols], &w[old_row * cols], cols * 4);
      }
    }
  }
  return out;
}

void ExpectConverted(const std::filesystem::path& dir, const std::vector<Array>& arrays,
                     bool shared) {
  auto config = ModelConfig::Load(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->hidden_size, kDim);
  EXPECT_EQ(config->intermediate_size, kHidden);
  EXPECT_EQ(config->num_hidden_layers, kLayers);
  EXPECT_EQ(config->num_attention_heads, kHeads);
  EXPECT_EQ(config->num_key_value_heads, kKvHeads);
  EXPECT_EQ(config->head_dim, kHeadDim);
  EXPECT_EQ(config->vocab_size, kVocab);
  EXPECT_EQ(config->max_position_embeddings, kSeqLen);
  EXPECT_EQ(config->tie_word_embeddings, shared);

  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const Checkpoint& c = **ckpt;
  EXPECT_EQ(Read(c, "model.embed_tokens.weight", {kVocab, kDim}),
            Get(arrays, "tok_embeddings").values);
  EXPECT_EQ(Read(c, "model.norm.weight", {kDim}), Get(arrays, "rms_final").values);
  EXPECT_EQ(Read(c, "lm_head.weight", {kVocab, kDim}),
            Get(arrays, shared ? "tok_embeddings" : "wcls").values);
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    EXPECT_EQ(Read(c, p + "input_layernorm.weight", {kDim}), Layer(Get(arrays, "rms_att"), l));
    EXPECT_EQ(Read(c, p + "post_attention_layernorm.weight", {kDim}),
              Layer(Get(arrays, "rms_ffn"), l));
    EXPECT_EQ(Read(c, p + "self_attn.q_proj.weight", {kDim, kDim}),
              Permuted(Layer(Get(arrays, "wq"), l), kHeads, kDim));
    EXPECT_EQ(Read(c, p + "self_attn.k_proj.weight", {kKvDim, kDim}),
              Permuted(Layer(Get(arrays, "wk"), l), kKvHeads, kDim));
    EXPECT_EQ(Read(c, p + "self_attn.v_proj.weight", {kKvDim, kDim}), Layer(Get(arrays, "wv"), l));
    EXPECT_EQ(Read(c, p + "self_attn.o_proj.weight", {kDim, kDim}), Layer(Get(arrays, "wo"), l));
    EXPECT_EQ(Read(c, p + "mlp.gate_proj.weight", {kHidden, kDim}), Layer(Get(arrays, "w1"), l));
    EXPECT_EQ(Read(c, p + "mlp.down_proj.weight", {kDim, kHidden}), Layer(Get(arrays, "w2"), l));
    EXPECT_EQ(Read(c, p + "mlp.up_proj.weight", {kHidden, kDim}), Layer(Get(arrays, "w3"), l));
  }
  // The permutation must actually move rows, or the check above proves nothing.
  EXPECT_NE(Permuted(Layer(Get(arrays, "wq"), 0), kHeads, kDim), Layer(Get(arrays, "wq"), 0));

  auto tok_text = ReadFileToString(dir / "tokenizer.json");
  ASSERT_TRUE(tok_text.ok());
  auto tok = nlohmann::json::parse(*tok_text, nullptr, false);
  ASSERT_FALSE(tok.is_discarded());
  const auto& vocab = tok["model"]["vocab"];
  EXPECT_EQ(vocab.size(), static_cast<size_t>(kVocab));
  EXPECT_EQ(vocab["<s>"], 1);
  EXPECT_EQ(vocab["</s>"], 2);
  EXPECT_EQ(vocab["<0x41>"], 3 + 0x41);
  EXPECT_EQ(vocab["\xE2\x96\x81"
                  "a"],
            259);
  EXPECT_EQ(vocab["\xE2\x96\x81"], 260);
  EXPECT_EQ(tok["model"]["merges"], nlohmann::json::parse(R"([["\u2581", "a"]])"));
}

TEST(ConvertLlama2cTest, LegacyFormatSharedClassifier) {
  const auto dir = testing::ScratchDir("v0");
  const auto arrays = MakeArrays(/*with_freq_cis=*/true, /*with_classifier=*/false);
  const auto bin = WriteFile(dir / "model.bin", V0File(arrays, true));
  const auto tok = WriteFile(dir / "tok.bin", TokenizerFile());
  absl::Status s = ConvertLlama2c(bin, tok, dir / "out");
  ASSERT_TRUE(s.ok()) << s;
  ExpectConverted(dir / "out", arrays, /*shared=*/true);
}

TEST(ConvertLlama2cTest, LegacyFormatNegativeVocabMeansSeparateClassifier) {
  const auto dir = testing::ScratchDir("v0");
  const auto arrays = MakeArrays(true, true);
  const auto bin = WriteFile(dir / "model.bin", V0File(arrays, false));
  const auto tok = WriteFile(dir / "tok.bin", TokenizerFile());
  absl::Status s = ConvertLlama2c(bin, tok, dir / "out");
  ASSERT_TRUE(s.ok()) << s;
  ExpectConverted(dir / "out", arrays, /*shared=*/false);
}

TEST(ConvertLlama2cTest, Version1Format) {
  for (bool shared : {true, false}) {
    const auto dir = testing::ScratchDir(shared ? "shared" : "unshared");
    const auto arrays = MakeArrays(false, !shared);
    const auto bin = WriteFile(dir / "model.bin", V1File(arrays, shared));
    auto header = ReadLlama2cHeader(bin);
    ASSERT_TRUE(header.ok()) << header.status();
    EXPECT_EQ(header->version, 1);
    EXPECT_EQ(header->shared_classifier, shared);
    const auto tok = WriteFile(dir / "tok.bin", TokenizerFile());
    absl::Status s = ConvertLlama2c(bin, tok, dir / "out");
    ASSERT_TRUE(s.ok()) << s;
    ExpectConverted(dir / "out", arrays, shared);
  }
}

void ExpectFails(const std::string& model_bytes, const std::string& tok_bytes,
                 absl::StatusCode code, const std::vector<std::string>& parts) {
  const auto dir = testing::ScratchDir("bad");
  const auto bin = WriteFile(dir / "model.bin", model_bytes);
  const auto tok = WriteFile(dir / "tok.bin", tok_bytes);
  absl::Status s = ConvertLlama2c(bin, tok, dir / "out");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), code) << s;
  for (const std::string& part : parts) EXPECT_THAT(std::string(s.message()), HasSubstr(part));
  // Nothing is written from bad inputs.
  EXPECT_FALSE(std::filesystem::exists(dir / "out" / "model.safetensors"));
}

TEST(ConvertLlama2cTest, TruncatedCheckpointNamesExpectedSize) {
  const std::string good = V0File(MakeArrays(true, false), true);
  ExpectFails(
      good.substr(0, good.size() - 4), TokenizerFile(), absl::StatusCode::kDataLoss,
      {"model.bin", "implies a file of " + std::to_string(good.size()) + " bytes", "truncated"});
  ExpectFails(good + "xxxx", TokenizerFile(), absl::StatusCode::kDataLoss,
              {"model.bin", std::to_string(good.size()), "trailing"});
  ExpectFails(good.substr(0, 10), TokenizerFile(), absl::StatusCode::kDataLoss,
              {"model.bin", "truncated"});
  const std::string v1 = V1File(MakeArrays(false, false), true);
  ExpectFails(v1.substr(0, 200), TokenizerFile(), absl::StatusCode::kDataLoss,
              {"model.bin", "256"});
  ExpectFails(v1.substr(0, v1.size() - 1), TokenizerFile(), absl::StatusCode::kDataLoss,
              {"model.bin", std::to_string(v1.size())});
}

TEST(ConvertLlama2cTest, RejectsUnsupportedOrInconsistentHeaders) {
  ExpectFails(V1File(MakeArrays(false, false), true, /*version=*/2), TokenizerFile(),
              absl::StatusCode::kUnimplemented, {"model.bin", "version 2"});
  std::string bad_heads = V0File(MakeArrays(true, false), true);
  const int32_t three = 3;
  std::memcpy(&bad_heads[12], &three, 4);  // n_heads = 3 does not divide dim = 8.
  ExpectFails(bad_heads, TokenizerFile(), absl::StatusCode::kInvalidArgument,
              {"model.bin", "n_heads=3"});
  std::string zero_layers = V0File(MakeArrays(true, false), true);
  std::memset(&zero_layers[8], 0, 4);
  ExpectFails(zero_layers, TokenizerFile(), absl::StatusCode::kInvalidArgument,
              {"model.bin", "n_layers=0"});
}

TEST(ConvertLlama2cTest, RejectsBadTokenizers) {
  const std::string model = V0File(MakeArrays(true, false), true);
  const std::string tok = TokenizerFile();
  ExpectFails(model, tok.substr(0, tok.size() - 1), absl::StatusCode::kDataLoss,
              {"tok.bin", "token 261"});
  ExpectFails(model, tok + "extra", absl::StatusCode::kDataLoss, {"tok.bin", "5 bytes left"});
  std::string huge = tok;
  const int32_t len = 1 << 30;
  std::memcpy(&huge[4 + 4], &len, 4);  // Token 0 claims 1 GiB.
  ExpectFails(model, huge, absl::StatusCode::kDataLoss, {"tok.bin", "token 0"});
}

TEST(ConvertLlama2cTest, MissingInputsAreNotFound) {
  const auto dir = testing::ScratchDir("missing");
  absl::Status s = ConvertLlama2c(dir / "nope.bin", dir / "tok.bin", dir / "out");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr("nope.bin"));
}

}  // namespace
}  // namespace tessera
