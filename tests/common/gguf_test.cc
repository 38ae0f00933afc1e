// The GGUF reader (common/gguf_file.h), the ggml block decoders and their int8/int4
// mappings (common/gguf_quants.h), the metadata translation (common/gguf_hf.h) and
// Checkpoint reading a GGUF file. The files are built here byte by byte.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/checkpoint.h"
#include "common/dtype.h"
#include "common/gguf_file.h"
#include "common/gguf_hf.h"
#include "common/gguf_quants.h"
#include "common/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/support/test_model.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

// A GGUF v3 image: metadata entries and tensors added in order, data aligned to 32.
class GgufBuilder {
 public:
  void U32(const std::string& key, uint32_t v) { Key(key, 4); Put(v); ++kv_; }
  void F32(const std::string& key, float v) { Key(key, 6); Put(v); ++kv_; }
  void Bool(const std::string& key, bool v) { Key(key, 7); Put<uint8_t>(v ? 1 : 0); ++kv_; }
  void Str(const std::string& key, const std::string& v) { Key(key, 8); PutString(&meta_, v); ++kv_; }
  void StrArray(const std::string& key, const std::vector<std::string>& v) {
    Key(key, 9);
    Put<uint32_t>(8);
    Put<uint64_t>(v.size());
    for (const std::string& s : v) PutString(&meta_, s);
    ++kv_;
  }
  void F32Array(const std::string& key, const std::vector<float>& v) {
    Key(key, 9);
    Put<uint32_t>(6);
    Put<uint64_t>(v.size());
    for (float x : v) Put(x);
    ++kv_;
  }
  void I32Array(const std::string& key, const std::vector<int32_t>& v) {
    Key(key, 9);
    Put<uint32_t>(5);
    Put<uint64_t>(v.size());
    for (int32_t x : v) Put(x);
    ++kv_;
  }
  // `dims` innermost first, `bytes` the tensor's data.
  void Tensor(const std::string& name, GgmlType type, std::vector<uint64_t> dims, std::string bytes) {
    tensors_.push_back({name, type, std::move(dims), std::move(bytes), 0});
  }
  // Override a tensor's recorded offset (to build corrupt files).
  void ForceOffset(size_t tensor, uint64_t offset) { forced_[tensor] = offset; }

  std::string Build(uint32_t version = 3) const {
    std::string out;
    Append(&out, uint32_t{0x46554747});
    Append(&out, version);
    Append(&out, uint64_t{tensors_.size()});
    Append(&out, uint64_t{kv_});
    out += meta_;
    std::string data;
    std::vector<uint64_t> offsets;
    for (const auto& t : tensors_) {
      while (data.size() % 32 != 0) data.push_back('\0');
      offsets.push_back(data.size());
      data += t.bytes;
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const auto& t = tensors_[i];
      PutString(&out, t.name);
      Append(&out, static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims) Append(&out, d);
      Append(&out, static_cast<uint32_t>(t.type));
      auto forced = forced_.find(i);
      Append(&out, forced != forced_.end() ? forced->second : offsets[i]);
    }
    while (out.size() % 32 != 0) out.push_back('\0');
    return out + data;
  }

 private:
  struct Entry {
    std::string name;
    GgmlType type;
    std::vector<uint64_t> dims;
    std::string bytes;
    uint64_t offset;
  };
  template <typename T>
  static void Append(std::string* s, T v) {
    s->append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  static void PutString(std::string* s, const std::string& v) {
    Append(s, uint64_t{v.size()});
    s->append(v);
  }
  template <typename T>
  void Put(T v) { Append(&meta_, v); }
  void Key(const std::string& key, uint32_t type) {
    PutString(&meta_, key);
    Put(type);
  }

  std::string meta_;
  uint64_t kv_ = 0;
  std::vector<Entry> tensors_;
  std::map<size_t, uint64_t> forced_;
};

absl::StatusOr<std::unique_ptr<GgufFile>> ParseString(const std::string& image) {
  return GgufFile::Parse(reinterpret_cast<const uint8_t*>(image.data()), image.size(), "test.gguf");
}

std::string Floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

void PutHalf(std::string* s, float v) {
  const uint16_t h = F32ToF16(v);
  s->append(reinterpret_cast<const char*>(&h), 2);
}

// Random blocks of `type` whose scales are small positive halves (so no group is
// degenerate) and whose code bytes are random.
std::string RandomBlocks(GgmlType type, int blocks, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> scale(0.002f, 0.02f);
  std::string out;
  for (int b = 0; b < blocks; ++b) {
    const int size = GgmlTypeSize(type);
    std::string block(static_cast<size_t>(size), '\0');
    for (char& c : block) c = static_cast<char>(rng() & 0xFF);
    const auto set_half = [&](size_t at, float v) {
      const uint16_t h = F32ToF16(v);
      std::memcpy(&block[at], &h, 2);
    };
    switch (type) {
      case GgmlType::kQ4_0: case GgmlType::kQ8_0: set_half(0, scale(rng)); break;
      case GgmlType::kQ4_1: set_half(0, scale(rng)); set_half(2, -scale(rng) * 8); break;
      case GgmlType::kQ4_K: set_half(0, scale(rng) / 16); set_half(2, scale(rng) / 16); break;
      case GgmlType::kQ6_K: set_half(208, scale(rng) / 16); break;
      default: break;
    }
    out += block;
  }
  return out;
}

TEST(GgufFileTest, ReadsMetadataAndTensors) {
  GgufBuilder b;
  b.Str("general.architecture", "llama");
  b.U32("llama.block_count", 2);
  b.F32("llama.rope.freq_base", 500000.0f);
  b.Bool("tokenizer.ggml.add_bos_token", true);
  b.StrArray("tokenizer.ggml.tokens", {"a", "b", "c"});
  b.I32Array("tokenizer.ggml.token_type", {1, 1, 3});
  b.Tensor("w", GgmlType::kF32, {4, 2}, Floats({1, 2, 3, 4, 5, 6, 7, 8}));
  b.Tensor("q", GgmlType::kQ8_0, {32}, RandomBlocks(GgmlType::kQ8_0, 1, 1));
  const std::string image = b.Build();
  auto file = ParseString(image);
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = **file;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(*f.String("general.architecture"), "llama");
  EXPECT_EQ(*f.Int("llama.block_count"), 2);
  EXPECT_FLOAT_EQ(static_cast<float>(*f.Float("llama.rope.freq_base")), 500000.0f);
  EXPECT_DOUBLE_EQ(*f.Float("llama.block_count"), 2.0);  // Integers read as floats too.
  EXPECT_TRUE(*f.Bool("tokenizer.ggml.add_bos_token"));
  EXPECT_EQ(**f.StringArray("tokenizer.ggml.tokens"), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(**f.IntArray("tokenizer.ggml.token_type"), (std::vector<int64_t>{1, 1, 3}));
  EXPECT_EQ(*f.IntOr("llama.missing", 7), 7);
  EXPECT_EQ(f.Int("llama.missing").status().code(), absl::StatusCode::kNotFound);
  const absl::Status wrong = f.Int("general.architecture").status();
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.message().find("\"general.architecture\" is a string, expected an integer"), std::string::npos)
      << wrong;

  ASSERT_EQ(f.tensors().size(), 2u);
  const GgufTensor* w = f.FindTensor("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->rows(), 2);
  EXPECT_EQ(w->cols(), 4);
  EXPECT_EQ(w->bytes, 32u);
  float second_row[4];
  std::memcpy(second_row, w->row(1), sizeof(second_row));
  EXPECT_EQ(second_row[0], 5.0f);
  EXPECT_EQ(f.FindTensor("q")->bytes, 34u);
  EXPECT_EQ(f.FindTensor("absent"), nullptr);
}

TEST(GgufFileTest, EveryTruncationIsAnErrorNeverACrash) {
  GgufBuilder b;
  b.Str("general.architecture", "llama");
  b.StrArray("tokenizer.ggml.tokens", {"a", "bb"});
  b.Tensor("blk.0.attn_q.weight", GgmlType::kQ4_K, {256, 2}, RandomBlocks(GgmlType::kQ4_K, 2, 2));
  const std::string image = b.Build();
  ASSERT_TRUE(ParseString(image).ok());
  for (size_t n = 0; n < image.size(); ++n) {
    auto file = ParseString(image.substr(0, n));
    ASSERT_FALSE(file.ok()) << "a prefix of " << n << " bytes parsed";
  }
  // Cut inside the data: the error names the tensor.
  const absl::Status cut = ParseString(image.substr(0, image.size() - 10)).status();
  EXPECT_EQ(cut.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(cut.message().find("tensor \"blk.0.attn_q.weight\" (Q4_K, 288 bytes"), std::string::npos) << cut;
  EXPECT_NE(cut.message().find("truncated?"), std::string::npos) << cut;
}

TEST(GgufFileTest, RefusesWhatCannotBeAGgufFile) {
  EXPECT_NE(ParseString("GGML0000000000000000000000000000").status().message().find("not a GGUF file"),
            std::string::npos);
  GgufBuilder b;
  b.Str("general.architecture", "llama");
  const absl::Status v1 = ParseString(b.Build(/*version=*/1)).status();
  EXPECT_NE(v1.message().find("GGUF version 1 is not supported"), std::string::npos) << v1;

  // A header claiming more entries than bytes.
  std::string huge = b.Build();
  const uint64_t count = uint64_t{1} << 60;
  std::memcpy(&huge[16], &count, 8);
  const absl::Status too_many = ParseString(huge).status();
  EXPECT_EQ(too_many.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(too_many.message().find("more than"), std::string::npos) << too_many;
}

TEST(GgufFileTest, RefusesBadTensorEntriesNamingTheTensor) {
  const auto error_of = [](GgufBuilder b) { return ParseString(b.Build()).status(); };
  {
    GgufBuilder b;
    b.Tensor("odd", GgmlType::kQ4_0, {48}, std::string(36, '\0'));
    const absl::Status s = error_of(b);
    EXPECT_NE(s.message().find("tensor \"odd\": its innermost dimension 48 is not a multiple of Q4_0's block of 32"),
              std::string::npos) << s;
  }
  {
    GgufBuilder b;
    b.Tensor("strange", static_cast<GgmlType>(99), {4}, std::string(16, '\0'));
    const absl::Status s = error_of(b);
    EXPECT_NE(s.message().find("tensor \"strange\" has ggml type 99"), std::string::npos) << s;
  }
  {
    GgufBuilder b;
    b.Tensor("a", GgmlType::kF32, {16}, std::string(64, '\0'));
    b.Tensor("b", GgmlType::kF32, {16}, std::string(64, '\0'));
    b.ForceOffset(1, 32);  // Inside "a".
    const absl::Status s = error_of(b);
    EXPECT_NE(s.message().find("tensors \"a\" and \"b\" overlap"), std::string::npos) << s;
  }
  {
    GgufBuilder b;
    b.Tensor("a", GgmlType::kF32, {16}, std::string(64, '\0'));
    b.ForceOffset(0, 4);
    const absl::Status s = error_of(b);
    EXPECT_NE(s.message().find("tensor \"a\": offset 4 is not aligned to 32"), std::string::npos) << s;
  }
}

TEST(GgufQuantsTest, DecodesTheSmallBlockTypes) {
  // Q4_0: d = 0.5, codes 0..15 then 15..0: w = (q - 8) d.
  std::string q4_0;
  PutHalf(&q4_0, 0.5f);
  for (int j = 0; j < 16; ++j) q4_0.push_back(static_cast<char>(j | ((15 - j) << 4)));
  float y[32];
  ASSERT_TRUE(DequantizeGgml(GgmlType::kQ4_0, reinterpret_cast<const uint8_t*>(q4_0.data()), 32, y).ok());
  EXPECT_EQ(y[0], -4.0f);    // Low nibble of byte 0.
  EXPECT_EQ(y[15], 3.5f);    // Low nibble of byte 15.
  EXPECT_EQ(y[16], 3.5f);    // High nibble of byte 0: element 16.
  EXPECT_EQ(y[31], -4.0f);

  // Q4_1: w = q d + m.
  std::string q4_1;
  PutHalf(&q4_1, 0.25f);
  PutHalf(&q4_1, -1.0f);
  for (int j = 0; j < 16; ++j) q4_1.push_back(static_cast<char>(j | (j << 4)));
  ASSERT_TRUE(DequantizeGgml(GgmlType::kQ4_1, reinterpret_cast<const uint8_t*>(q4_1.data()), 32, y).ok());
  EXPECT_EQ(y[3], 3 * 0.25f - 1.0f);
  EXPECT_EQ(y[19], 3 * 0.25f - 1.0f);

  // Q8_0: w = q d.
  std::string q8;
  PutHalf(&q8, 0.125f);
  for (int j = 0; j < 32; ++j) q8.push_back(static_cast<char>(j - 16));
  ASSERT_TRUE(DequantizeGgml(GgmlType::kQ8_0, reinterpret_cast<const uint8_t*>(q8.data()), 32, y).ok());
  EXPECT_EQ(y[0], -2.0f);
  EXPECT_EQ(y[31], 15 * 0.125f);

  // Q5_0: d = 0.25, qh = 0xFFFF0000 (fifth bit set for elements 16..31), low nibbles j.
  std::string q5_0;
  PutHalf(&q5_0, 0.25f);
  const uint32_t qh = 0xFFFF0000u;
  q5_0.append(reinterpret_cast<const char*>(&qh), 4);
  for (int j = 0; j < 16; ++j) q5_0.push_back(static_cast<char>(j | (j << 4)));
  ASSERT_TRUE(DequantizeGgml(GgmlType::kQ5_0, reinterpret_cast<const uint8_t*>(q5_0.data()), 32, y).ok());
  EXPECT_EQ(y[3], (3 - 16) * 0.25f);        // No fifth bit: q = 3.
  EXPECT_EQ(y[16 + 3], (3 + 16 - 16) * 0.25f);  // Fifth bit: q = 19.
  // Q5_1: w = q d + m.
  std::string q5_1;
  PutHalf(&q5_1, 0.5f);
  PutHalf(&q5_1, -2.0f);
  q5_1.append(reinterpret_cast<const char*>(&qh), 4);
  for (int j = 0; j < 16; ++j) q5_1.push_back(static_cast<char>(j | (j << 4)));
  ASSERT_TRUE(DequantizeGgml(GgmlType::kQ5_1, reinterpret_cast<const uint8_t*>(q5_1.data()), 32, y).ok());
  EXPECT_EQ(y[5], 5 * 0.5f - 2.0f);
  EXPECT_EQ(y[16 + 5], 21 * 0.5f - 2.0f);

  const absl::Status q5 = DequantizeGgml(GgmlType::kQ5_K, nullptr, 256, y);
  EXPECT_EQ(q5.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(q5.message().find("Q5_K"), std::string::npos);
}

TEST(GgufQuantsTest, Q4KSubBlockScalesAndNibbleOrder) {
  // d = 1, dmin = 0.5, every sub-block scale j+1 and min j, codes: byte l = l % 16 | 15 - l % 16.
  std::string block;
  PutHalf(&block, 1.0f);
  PutHalf(&block, 0.5f);
  uint8_t scales[12] = {};
  for (int j = 0; j < 8; ++j) {
    const int sc = j + 1, m = j;
    if (j < 4) {
      scales[j] = static_cast<uint8_t>(sc);
      scales[j + 4] = static_cast<uint8_t>(m);
    } else {
      scales[j + 4] = static_cast<uint8_t>((sc & 0xF) | ((m & 0xF) << 4));
      scales[j - 4] |= static_cast<uint8_t>((sc >> 4) << 6);
      scales[j] |= static_cast<uint8_t>((m >> 4) << 6);
    }
  }
  block.append(reinterpret_cast<const char*>(scales), 12);
  for (int l = 0; l < 128; ++l) block.push_back(static_cast<char>((l % 16) | ((15 - l % 16) << 4)));
  std::vector<float> y(256);
  ASSERT_TRUE(DequantizeGgml(GgmlType::kQ4_K, reinterpret_cast<const uint8_t*>(block.data()), 256, y.data()).ok());
  // Run r covers elements [64 r, 64 r + 64): sub-block 2r from the low nibbles, 2r + 1 from the high.
  for (int r = 0; r < 4; ++r) {
    for (int l = 0; l < 32; ++l) {
      const int lo = l % 16, hi = 15 - l % 16;
      EXPECT_EQ(y[64 * r + l], static_cast<float>(2 * r + 1) * lo - 0.5f * (2 * r)) << r << " " << l;
      EXPECT_EQ(y[64 * r + 32 + l], static_cast<float>(2 * r + 2) * hi - 0.5f * (2 * r + 1)) << r << " " << l;
    }
  }
}

TEST(GgufQuantsTest, NativeInt4AndInt8CarryTheFilesNumbers) {
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ4_K}) {
    const int64_t cols = 512;
    const std::string row = RandomBlocks(type, static_cast<int>(cols / GgmlBlockSize(type)), 7);
    std::vector<float> reference(cols);
    ASSERT_TRUE(DequantizeGgml(type, reinterpret_cast<const uint8_t*>(row.data()), cols, reference.data()).ok());
    std::vector<uint8_t> packed(cols / 2);
    std::vector<float> scales(cols / 32), zeros(cols / 32);
    ASSERT_TRUE(GgmlMapsToInt4(type));
    ASSERT_TRUE(GgmlRowToInt4(type, reinterpret_cast<const uint8_t*>(row.data()), cols, packed.data(),
                              scales.data(), zeros.data()));
    for (int64_t c = 0; c < cols; ++c) {
      const int q = (packed[c / 2] >> (4 * (c & 1))) & 0xF;
      const float w = scales[c / 32] * (static_cast<float>(q) - zeros[c / 32]);
      EXPECT_NEAR(w, reference[c], 1e-6f * (1.0f + std::fabs(reference[c]))) << GgmlTypeName(type) << " col " << c;
    }
  }
  const std::string row = RandomBlocks(GgmlType::kQ8_0, 4, 9);
  std::vector<float> reference(128);
  ASSERT_TRUE(DequantizeGgml(GgmlType::kQ8_0, reinterpret_cast<const uint8_t*>(row.data()), 128, reference.data()).ok());
  std::vector<int8_t> codes(128);
  std::vector<float> scales(4);
  GgmlRowToInt8(GgmlType::kQ8_0, reinterpret_cast<const uint8_t*>(row.data()), 128, codes.data(), scales.data());
  for (int c = 0; c < 128; ++c) EXPECT_EQ(scales[c / 32] * codes[c], reference[c]);  // Exact.

  // Q4_1 with d = 0 and m != 0 has no zero point: refused, so the loader reads floats.
  std::string flat;
  PutHalf(&flat, 0.0f);
  PutHalf(&flat, 0.75f);
  flat.append(16, '\x11');
  std::vector<uint8_t> packed(16);
  std::vector<float> s(1), z(1);
  EXPECT_FALSE(GgmlRowToInt4(GgmlType::kQ4_1, reinterpret_cast<const uint8_t*>(flat.data()), 32, packed.data(),
                             s.data(), z.data()));
}

TEST(GgufTensorRefTest, UndoesLlamaCppsRotaryInterleave) {
  // head_dim 4: llama.cpp stores a head's rows as (0, 2, 1, 3) of Hugging Face's.
  GgufTensorRef ref{nullptr, 4};
  EXPECT_EQ(ref.SourceRow(0), 0);
  EXPECT_EQ(ref.SourceRow(1), 2);
  EXPECT_EQ(ref.SourceRow(2), 1);
  EXPECT_EQ(ref.SourceRow(3), 3);
  EXPECT_EQ(ref.SourceRow(5), 6);  // Second head.
  EXPECT_EQ(GgufTensorRef{}.SourceRow(5), 5);
}

// A whole tiny llama model: 1 layer, hidden 32, 2 heads of 16, 1 KV head, byte vocabulary.
GgufBuilder TinyLlama(const std::string& pre = "smollm") {
  GgufBuilder b;
  b.Str("general.architecture", "llama");
  b.U32("llama.block_count", 1);
  b.U32("llama.context_length", 128);
  b.U32("llama.embedding_length", 32);
  b.U32("llama.feed_forward_length", 64);
  b.U32("llama.attention.head_count", 2);
  b.U32("llama.attention.head_count_kv", 1);
  b.F32("llama.attention.layer_norm_rms_epsilon", 1e-6f);
  b.Str("tokenizer.ggml.model", "gpt2");
  b.Str("tokenizer.ggml.pre", pre);
  std::vector<std::string> tokens = {"<|im_start|>", "<|im_end|>"};
  std::vector<int32_t> types = {3, 3};
  for (char c = 'a'; c <= 'z'; ++c) {
    tokens.push_back(std::string(1, c));
    types.push_back(1);
  }
  tokens.push_back("ab");
  types.push_back(1);
  b.StrArray("tokenizer.ggml.tokens", tokens);
  b.I32Array("tokenizer.ggml.token_type", types);
  b.StrArray("tokenizer.ggml.merges", {"a b"});
  b.U32("tokenizer.ggml.bos_token_id", 0);
  b.U32("tokenizer.ggml.eos_token_id", 1);
  b.Bool("tokenizer.ggml.add_bos_token", false);
  b.Str("tokenizer.chat_template", "{{ messages[0]['content'] }}");
  const uint64_t vocab = tokens.size();
  b.Tensor("token_embd.weight", GgmlType::kQ8_0, {32, vocab}, RandomBlocks(GgmlType::kQ8_0, static_cast<int>(vocab), 3));
  b.Tensor("output_norm.weight", GgmlType::kF32, {32}, Floats(std::vector<float>(32, 1.0f)));
  b.Tensor("blk.0.attn_norm.weight", GgmlType::kF32, {32}, Floats(std::vector<float>(32, 1.0f)));
  b.Tensor("blk.0.ffn_norm.weight", GgmlType::kF32, {32}, Floats(std::vector<float>(32, 1.0f)));
  b.Tensor("blk.0.attn_q.weight", GgmlType::kQ4_1, {32, 32}, RandomBlocks(GgmlType::kQ4_1, 32, 4));
  b.Tensor("blk.0.attn_k.weight", GgmlType::kQ4_0, {32, 16}, RandomBlocks(GgmlType::kQ4_0, 16, 5));
  b.Tensor("blk.0.attn_v.weight", GgmlType::kQ8_0, {32, 16}, RandomBlocks(GgmlType::kQ8_0, 16, 6));
  b.Tensor("blk.0.attn_output.weight", GgmlType::kQ4_0, {32, 32}, RandomBlocks(GgmlType::kQ4_0, 32, 7));
  b.Tensor("blk.0.ffn_gate.weight", GgmlType::kQ4_1, {32, 64}, RandomBlocks(GgmlType::kQ4_1, 64, 8));
  b.Tensor("blk.0.ffn_up.weight", GgmlType::kQ8_0, {32, 64}, RandomBlocks(GgmlType::kQ8_0, 64, 9));
  b.Tensor("blk.0.ffn_down.weight", GgmlType::kQ4_0, {64, 32}, RandomBlocks(GgmlType::kQ4_0, 64, 10));
  return b;
}

TEST(GgufHfTest, TranslatesALlamaFile) {
  const std::string image = TinyLlama().Build();
  auto file = ParseString(image);
  ASSERT_TRUE(file.ok()) << file.status();
  auto files = GgufToHfFiles(**file);
  ASSERT_TRUE(files.ok()) << files.status();
  const ModelConfig& c = files->config;
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.hidden_size, 32);
  EXPECT_EQ(c.num_attention_heads, 2);
  EXPECT_EQ(c.num_key_value_heads, 1);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.vocab_size, 29);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{1});
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  const auto config = nlohmann::json::parse(files->tokenizer_config_json);
  EXPECT_EQ(config["chat_template"], "{{ messages[0]['content'] }}");
  EXPECT_EQ(config["eos_token"], "<|im_end|>");
  EXPECT_EQ(config["add_bos_token"], false);
  const auto tokenizer = nlohmann::json::parse(files->tokenizer_json);
  EXPECT_EQ(tokenizer["model"]["vocab"]["ab"], 28);
  EXPECT_EQ(tokenizer["model"]["merges"][0], nlohmann::json::array({"a", "b"}));
  ASSERT_EQ(tokenizer["added_tokens"].size(), 2u);
  EXPECT_EQ(tokenizer["added_tokens"][1]["content"], "<|im_end|>");
  EXPECT_EQ(tokenizer["pre_tokenizer"]["pretokenizers"][0]["type"], "Digits");

  auto tensors = GgufHfTensors(**file, c);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_EQ(tensors->at("model.layers.0.self_attn.q_proj.weight").permuted_head_dim, 16);
  EXPECT_EQ(tensors->at("model.layers.0.self_attn.k_proj.weight").permuted_head_dim, 16);
  EXPECT_EQ(tensors->at("model.layers.0.self_attn.v_proj.weight").permuted_head_dim, 0);
  EXPECT_EQ(tensors->at("model.embed_tokens.weight").tensor->name, "token_embd.weight");
}

TEST(GgufHfTest, RefusesWhatItCannotServeByName) {
  {
    GgufBuilder b;
    b.Str("general.architecture", "gemma3");
    auto file = ParseString(b.Build());
    const absl::Status s = GgufToHfFiles(**file).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
    EXPECT_NE(s.message().find("general.architecture \"gemma3\" is not served (supported: llama, qwen2, qwen3)"),
              std::string::npos) << s;
  }
  {
    auto file = ParseString(TinyLlama("chameleon").Build());
    ASSERT_TRUE(file.ok()) << file.status();
    const absl::Status s = GgufToHfFiles(**file).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
    EXPECT_NE(s.message().find("tokenizer.ggml.pre \"chameleon\" is not supported"), std::string::npos) << s;
  }
  {
    GgufBuilder b = TinyLlama();
    b.Str("tokenizer.ggml.pre", "gpt-2");
    auto file = ParseString(b.Build());
    EXPECT_NE(file.status().message().find("metadata key \"tokenizer.ggml.pre\" appears twice"), std::string::npos)
        << file.status();
  }
  {
    GgufBuilder b;
    b.Str("general.architecture", "llama");
    auto file = ParseString(b.Build());
    const absl::Status s = GgufToHfFiles(**file).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
    EXPECT_NE(s.message().find("metadata \"llama.block_count\" is missing"), std::string::npos) << s;
  }
}

// Loads the tokenizer GgufToHfFiles writes for `image` from a scratch folder.
std::unique_ptr<Tokenizer> TokenizerOf(const std::string& image) {
  auto file = ParseString(image);
  EXPECT_TRUE(file.ok()) << file.status();
  auto files = GgufToHfFiles(**file);
  EXPECT_TRUE(files.ok()) << files.status();
  const std::filesystem::path dir = testing::ScratchDir("tokenizer");
  std::ofstream(dir / "tokenizer.json") << files->tokenizer_json;
  std::ofstream(dir / "tokenizer_config.json") << files->tokenizer_config_json;
  auto tokenizer = Tokenizer::Load(dir);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? std::move(*tokenizer) : nullptr;
}

TEST(GgufHfTest, ByteLevelTokenizerEncodesWithTheFilesMergesAndSpecials) {
  auto tokenizer = TokenizerOf(TinyLlama().Build());
  ASSERT_NE(tokenizer, nullptr);
  // "ab" merges; the Digits-free text splits on nothing else; control tokens are matched
  // whole, and no BOS is added (add_bos_token false).
  EXPECT_EQ(tokenizer->Encode("abc"), (std::vector<int32_t>{28, 4}));
  EXPECT_EQ(tokenizer->Encode("<|im_start|>ab<|im_end|>"), (std::vector<int32_t>{0, 28, 1}));
  EXPECT_TRUE(tokenizer->IsSpecial(1));
  EXPECT_EQ(tokenizer->Decode({28, 4}), "abc");
}

TEST(GgufHfTest, SentencePieceTokenizerAddsBosAndFallsBackToBytes) {
  GgufBuilder b;
  b.Str("general.architecture", "llama");
  b.U32("llama.block_count", 1);
  b.U32("llama.embedding_length", 32);
  b.U32("llama.feed_forward_length", 64);
  b.U32("llama.attention.head_count", 2);
  b.Str("tokenizer.ggml.model", "llama");
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  for (int byte = 0; byte < 256; ++byte) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", byte);
    tokens.push_back(name);
    types.push_back(6);
  }
  const std::string space = "\xE2\x96\x81";  // "▁"
  for (const std::string& piece : {space, std::string("h"), std::string("i"), space + "h", space + "hi",
                                   std::string("[INST]")}) {
    tokens.push_back(piece);
    types.push_back(piece == "[INST]" ? 3 : 1);
  }
  std::vector<float> scores(tokens.size(), 0.0f);
  for (size_t i = 259; i < tokens.size(); ++i) scores[i] = -static_cast<float>(i);
  scores[263] = 10.0f;  // "▁hi" merges first.
  b.StrArray("tokenizer.ggml.tokens", tokens);
  b.I32Array("tokenizer.ggml.token_type", types);
  b.F32Array("tokenizer.ggml.scores", scores);
  b.U32("tokenizer.ggml.bos_token_id", 1);
  b.U32("tokenizer.ggml.eos_token_id", 2);
  b.Tensor("token_embd.weight", GgmlType::kF32, {32, tokens.size()},
           Floats(std::vector<float>(32 * tokens.size(), 0.0f)));
  auto tokenizer = TokenizerOf(b.Build());
  ASSERT_NE(tokenizer, nullptr);
  const int32_t hi = 263, inst = 264;
  EXPECT_EQ(tokenizer->Encode("hi"), (std::vector<int32_t>{1, hi}));  // <s> ▁hi
  // "é" is not a piece: its two UTF-8 bytes fall back to <0xC3> <0xA9>.
  EXPECT_EQ(tokenizer->Encode("é", /*add_special_tokens=*/false), (std::vector<int32_t>{259, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(tokenizer->Encode("[INST]", false), (std::vector<int32_t>{inst}));
  EXPECT_EQ(tokenizer->Decode({1, hi}), "hi");
}

TEST(GgufCheckpointTest, ReadsSlicesUnderHuggingFaceNames) {
  const std::filesystem::path path = std::filesystem::path(::testing::TempDir()) / "tiny_llama.gguf";
  {
    const std::string image = TinyLlama().Build();
    std::ofstream(path, std::ios::binary).write(image.data(), static_cast<std::streamsize>(image.size()));
  }
  auto checkpoint = Checkpoint::Open(path);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  const Checkpoint& ck = **checkpoint;
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok());
  const GgufTensor& q = *(*file)->FindTensor("blk.0.attn_q.weight");

  // Row 1 of q_proj in Hugging Face order is file row 8 (head_dim 16: rows 0, 2, 4, ... then 1, 3, ...).
  std::vector<float> ours(32), file_row(32);
  ASSERT_TRUE(ck.ReadSlice("model.layers.0.self_attn.q_proj.weight", {1, 2}, {0, 32}, DType::kF32, ours.data()).ok());
  ASSERT_TRUE(DequantizeGgml(q.type, q.row(2), 32, file_row.data()).ok());
  EXPECT_EQ(ours, file_row);
  // Row 8 of Hugging Face's is the second half's first row: file row 1.
  ASSERT_TRUE(ck.ReadSlice("model.layers.0.self_attn.q_proj.weight", {8, 9}, {0, 32}, DType::kF32, ours.data()).ok());
  ASSERT_TRUE(DequantizeGgml(q.type, q.row(1), 32, file_row.data()).ok());
  EXPECT_EQ(ours, file_row);

  // A column slice inside a block, converted to BF16.
  const GgufTensor& down = *(*file)->FindTensor("blk.0.ffn_down.weight");
  std::vector<uint16_t> slice(10);
  ASSERT_TRUE(ck.ReadSlice("model.layers.0.mlp.down_proj.weight", {3, 4}, {37, 47}, DType::kBF16, slice.data()).ok());
  std::vector<float> full(64);
  ASSERT_TRUE(DequantizeGgml(down.type, down.row(3), 64, full.data()).ok());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(slice[i], F32ToBf16(full[37 + i]));

  auto info = ck.Info("model.layers.0.mlp.down_proj.weight");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ((*info)->shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ((*info)->dtype, DType::kF32);
  ASSERT_NE(ck.Gguf("model.layers.0.mlp.down_proj.weight"), nullptr);
  EXPECT_EQ(ck.Gguf("model.layers.0.mlp.down_proj.weight")->tensor->type, GgmlType::kQ4_0);
  EXPECT_FALSE(ck.Has("lm_head.weight"));
}

}  // namespace
}  // namespace tessera
